//! Thin, owning wrappers over the raw CUDA driver API (cudarc's types, called through [`raw`],
//! which returns the driver's code as an integer): the one place that turns a code (or a missing
//! driver symbol) into a [`GpuError`], naming it as `CUresult` only where the bindings know it,
//! and the RAII types for the current context, device memory, events, libraries and mapped host
//! flags that undo themselves on drop, so that every error path leaves the thread and the device
//! as it found them.
//!
//! The raw API is used instead of cudarc's safe layer because green contexts, context-independent
//! libraries and per-stream timing need handles the safe layer does not expose.

use std::ffi::{c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;
use std::time::{Duration, Instant};

use cudarc::driver::sys::{self, CUresult};

use super::nvrtc::Image;
use super::raw;
use super::suite::HostBuf;
use crate::gpu::GpuError;

/// Run one driver call. cudarc panics when a symbol is missing from an older libcuda; that panic
/// is caught here so that the layer never unwinds into the daemon.
/// `f` is a call of [`raw`], which returns the driver's code as a plain integer.
pub fn check(call: &'static str, f: impl FnOnce() -> u32) -> Result<(), GpuError> {
    match code_of(call, f)? {
        CUresult::CUDA_SUCCESS => Ok(()),
        code => Err(error(call, code)),
    }
}

/// [`check`] for a query: whether the work it asks about has finished (`CUDA_ERROR_NOT_READY`:
/// not yet).
fn finished(call: &'static str, f: impl FnOnce() -> u32) -> Result<bool, GpuError> {
    match code_of(call, f)? {
        CUresult::CUDA_SUCCESS => Ok(true),
        CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        code => Err(error(call, code)),
    }
}

/// The code a driver call returned; the error for a symbol missing from libcuda, or for a code
/// these bindings do not name.
fn code_of(call: &'static str, f: impl FnOnce() -> u32) -> Result<CUresult, GpuError> {
    quiet_missing_symbols();
    let code = catch_unwind(AssertUnwindSafe(f)).map_err(|_| GpuError::Driver {
        call,
        detail: "symbol missing from libcuda: the driver is older than this API".into(),
    })?;
    named(code).ok_or_else(|| unnamed(call, code))
}

/// `code` as the bindings' `CUresult`, where they name it.
fn named(code: u32) -> Option<CUresult> {
    raw::KNOWN_CODES.binary_search(&code).ok().map(|_| {
        // SAFETY: `CUresult` is `#[repr(u32)]` and `code` is one of its discriminants.
        unsafe { std::mem::transmute::<u32, CUresult>(code) }
    })
}

/// A code a driver newer than these bindings returned: taken as a device fault, which costs a
/// reset where it was not one; taken as a call error, a sticky one would fail every later job
/// while the daemon stayed up ([`is_sticky`]). Except from the latch's stream wait, whose
/// refusal has a fallback (the gate kernel, `run::recovery_for`) that a reset would not reach.
fn unnamed(call: &'static str, code: u32) -> GpuError {
    let what = format!(
        "CUDA error {code}, a code the bindings ({}) do not name (a newer driver's)",
        raw::BINDINGS
    );
    if call == "cuStreamWaitValue32" {
        return GpuError::Driver { call, detail: what };
    }
    GpuError::Fault(format!("{call}: {what}, taken as a device fault"))
}

/// The launch time limit's default: far beyond any kernel a real-time scheduler runs
/// (microseconds to milliseconds), short enough that a kernel that never ends (a loop bound read
/// from the wrong buffer, a spin on a flag nothing sets) gives the GPU back in a minute rather
/// than never.
pub const DEFAULT_LAUNCH_TIMEOUT: Duration = Duration::from_secs(60);

/// [`launch_timeout`], in milliseconds.
static LAUNCH_TIMEOUT_MS: AtomicU64 = AtomicU64::new(DEFAULT_LAUNCH_TIMEOUT.as_millis() as u64);

/// How long one launch may run before it is taken as hung. A waiting driver call cannot be
/// interrupted, so every wait on a user's kernel polls instead ([`wait_within`]).
pub fn launch_timeout() -> Duration {
    Duration::from_millis(LAUNCH_TIMEOUT_MS.load(Ordering::Relaxed))
}

/// Set the launch time limit of every device in this process, for the waits that start after
/// it (at least a millisecond). One value per process, set before the devices open: the hang
/// test sets a few seconds rather than wait a minute for a kernel that never ends.
pub fn set_launch_timeout(limit: Duration) {
    let ms = limit.as_millis().clamp(1, u128::from(u64::MAX)) as u64;
    LAUNCH_TIMEOUT_MS.store(ms, Ordering::Relaxed);
}

/// `error`, having leaked `held` (buffers, a stressor) if it is a hang: freeing what a launch that
/// does not end may use would wait on it for ever ([`super::CudaGpu`] abandons the rest).
pub fn leak_if_hung<T>(error: GpuError, held: T) -> GpuError {
    if matches!(error, GpuError::Hung(_)) {
        std::mem::forget(held);
    }
    error
}

/// How long a wait polls without sleeping: the host is back at once for kernels of up to this
/// long, as the driver's own spin-wait would be, so the gap between timed launches stays short.
const SPIN: Duration = Duration::from_millis(10);

/// Poll `done` until it says the work has finished, for at most `limit`; then
/// [`GpuError::Hung`], naming `what`. Errors of `done` are returned as they come.
pub fn wait_within(
    what: &str,
    limit: Duration,
    mut done: impl FnMut() -> Result<bool, GpuError>,
) -> Result<(), GpuError> {
    let start = Instant::now();
    loop {
        if done()? {
            return Ok(());
        }
        let waited = start.elapsed();
        if waited >= limit {
            return Err(GpuError::Hung(format!(
                "{what} had not finished after {limit:?} (the launch time limit): a kernel that does not end cannot be stopped inside this process"
            )));
        }
        if waited < SPIN {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}

/// Errors after which the context is unusable are device faults, not call errors: every code the
/// driver API documents as leaving the process in an inconsistent state ("the process must be
/// terminated and relaunched"), so that recovery resets the device and, where that fails, the
/// daemon exits for its service manager to restart it. A call error only drops the prepared
/// problem, which after one of these would fail every later job while the daemon stayed up.
fn error(call: &'static str, code: CUresult) -> GpuError {
    let detail = describe(code);
    if is_sticky(code) {
        GpuError::Fault(format!("{call}: {detail}"))
    } else {
        GpuError::Driver { call, detail }
    }
}

/// The sticky errors of the 12.8 bindings: those `cuda.h` says leave the process inconsistent
/// ("must be terminated and relaunched"). `CONTAINED` (226), `TENSOR_MEMORY_LEAK` (721),
/// `MPS_CLIENT_TERMINATED` (810) and `EXTERNAL_DEVICE` (911) are in these bindings too: until
/// 2026-11-24 this list said they could not name the first two, and left all four out, so a
/// contained fault failed every later job while the daemon stayed up. Treating a code as sticky
/// that is not costs a device reset; the other way costs every job after it.
fn is_sticky(code: CUresult) -> bool {
    matches!(
        code,
        CUresult::CUDA_ERROR_CONTAINED
            | CUresult::CUDA_ERROR_TENSOR_MEMORY_LEAK
            | CUresult::CUDA_ERROR_MPS_CLIENT_TERMINATED
            | CUresult::CUDA_ERROR_EXTERNAL_DEVICE
            | CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
            | CUresult::CUDA_ERROR_LAUNCH_FAILED
            | CUresult::CUDA_ERROR_LAUNCH_TIMEOUT
            | CUresult::CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUresult::CUDA_ERROR_MISALIGNED_ADDRESS
            | CUresult::CUDA_ERROR_ECC_UNCORRECTABLE
            | CUresult::CUDA_ERROR_ASSERT
            | CUresult::CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUresult::CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUresult::CUDA_ERROR_INVALID_PC
            | CUresult::CUDA_ERROR_NVLINK_UNCORRECTABLE
    )
}

/// cudarc reports a symbol missing from an older libcuda by panicking; [`check`] catches it and
/// returns an error that says so, and this hook keeps the default hook from also printing a
/// backtrace-style message for it. Every other panic is printed as before.
fn quiet_missing_symbols() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let text = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied())
                .unwrap_or("");
            if !text.starts_with("Missing symbol") && !text.contains("dynamically load") {
                previous(info);
            }
        }));
    });
}

fn describe(code: CUresult) -> String {
    let mut text: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: cuGetErrorString writes a pointer to a static, NUL-terminated string or leaves it null.
    let found = catch_unwind(AssertUnwindSafe(|| unsafe {
        raw::cuGetErrorString(code, &mut text)
    }));
    if matches!(found, Ok(0)) && !text.is_null() {
        // SAFETY: non-null and NUL-terminated per the driver's contract; static lifetime.
        let msg = unsafe { CStr::from_ptr(text) }.to_string_lossy();
        format!("{code:?}: {msg}")
    } else {
        format!("{code:?}")
    }
}

/// `ctx` made current on this thread until the guard drops, when the context that was current
/// before is restored, on the success path and every error path alike.
pub struct Current(());

impl Current {
    pub fn push(ctx: sys::CUcontext) -> Result<Current, GpuError> {
        // SAFETY: `ctx` is a live context owned by the caller (primary or from a green context).
        check("cuCtxPushCurrent", || unsafe {
            raw::cuCtxPushCurrent_v2(ctx)
        })?;
        Ok(Current(()))
    }
}

impl Drop for Current {
    fn drop(&mut self) {
        let mut popped = std::ptr::null_mut();
        // SAFETY: pops exactly the context `push` pushed on this thread.
        let _ = check("cuCtxPopCurrent", || unsafe {
            raw::cuCtxPopCurrent_v2(&mut popped)
        });
    }
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
            raw::cuMemAlloc_v2(&mut ptr, bytes.max(4))
        })?;
        Ok(DeviceBuffer { ptr, bytes })
    }

    /// Allocate and fill from `host`, copying on `stream` and waiting for the copy to land. The
    /// partition's stream is non-blocking, so a copy on the NULL stream would not be ordered
    /// before the first launch on it; the copy goes on the same stream and is waited for.
    pub fn upload(host: &HostBuf, stream: sys::CUstream) -> Result<Self, GpuError> {
        let buf = Self::alloc(host.bytes())?;
        let src: *const c_void = host.as_ptr();
        // SAFETY: `src` points to `host.bytes()` readable bytes that outlive the synchronisation
        // below, and the allocation is that large.
        check("cuMemcpyHtoDAsync", || unsafe {
            raw::cuMemcpyHtoDAsync_v2(buf.ptr, src, host.bytes(), stream)
        })?;
        sync_stream(stream)?;
        Ok(buf)
    }

    /// Read the buffer back into a host buffer shaped like `like`, after all work on `stream`.
    pub fn download(&self, like: &HostBuf, stream: sys::CUstream) -> Result<HostBuf, GpuError> {
        let mut out = like.zeroed(self.bytes);
        let len = out.bytes();
        let dst: *mut c_void = out.as_mut_ptr();
        // SAFETY: `dst` has room for `len <= self.bytes` bytes and lives past the synchronisation.
        check("cuMemcpyDtoHAsync", || unsafe {
            raw::cuMemcpyDtoHAsync_v2(dst, self.ptr, len, stream)
        })?;
        sync_stream(stream)?;
        Ok(out)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: the pointer came from cuMemAlloc and is freed exactly once.
        let _ = check("cuMemFree", || unsafe { raw::cuMemFree_v2(self.ptr) });
    }
}

/// A CUDA event with timing enabled.
pub struct Event(sys::CUevent);

impl Event {
    pub fn new() -> Result<Self, GpuError> {
        let mut ev = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; flags 0 = default (timing enabled, spin-wait).
        check("cuEventCreate", || unsafe {
            raw::cuEventCreate(&mut ev, 0)
        })?;
        Ok(Event(ev))
    }

    pub fn record(&self, stream: sys::CUstream) -> Result<(), GpuError> {
        // SAFETY: event and stream are live and belong to the current context.
        check("cuEventRecord", || unsafe {
            raw::cuEventRecord(self.0, stream)
        })
    }

    /// Wait for the event, for at most `limit` ([`wait_within`]: `what` names the work).
    pub fn wait(&self, what: &str, limit: Duration) -> Result<(), GpuError> {
        wait_within(what, limit, || {
            // SAFETY: the event is live.
            finished("cuEventQuery", || unsafe { raw::cuEventQuery(self.0) })
        })
    }

    /// GPU-timeline time from `start` to this event, in nanoseconds (the driver's resolution is
    /// about half a microsecond).
    pub fn ns_since(&self, start: &Event) -> Result<u64, GpuError> {
        let mut ms = 0.0f32;
        // SAFETY: both events are live, recorded and completed (the caller synchronised).
        check("cuEventElapsedTime", || unsafe {
            raw::cuEventElapsedTime(&mut ms, start.0, self.0)
        })?;
        Ok((f64::from(ms) * 1e6).round().max(0.0) as u64)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created by cuEventCreate, destroyed once.
        let _ = check("cuEventDestroy", || unsafe {
            raw::cuEventDestroy_v2(self.0)
        });
    }
}

/// A context-independent library (CUDA 12.0+): loaded once, usable from every green context.
pub struct Library(sys::CUlibrary);

impl Library {
    /// Load a CUBIN (no JIT) or a PTX image (JIT-compiled by the driver).
    pub fn load(image: &Image) -> Result<Self, GpuError> {
        let image = image.bytes();
        let mut lib = std::ptr::null_mut();
        // SAFETY: `image` is a CUBIN or NUL-terminated PTX alive for the call; no options passed.
        check("cuLibraryLoadData", || unsafe {
            raw::cuLibraryLoadData(
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
        let cname =
            std::ffi::CString::new(name).map_err(|_| GpuError::UnsupportedKernel(name.into()))?;
        let mut kernel = std::ptr::null_mut();
        // SAFETY: the library is loaded and `cname` is NUL-terminated.
        check("cuLibraryGetKernel", || unsafe {
            raw::cuLibraryGetKernel(&mut kernel, self.0, cname.as_ptr())
        })?;
        let mut func = std::ptr::null_mut();
        // SAFETY: `kernel` was just returned by the driver; a context is current (caller's duty).
        check("cuKernelGetFunction", || unsafe {
            raw::cuKernelGetFunction(&mut func, kernel)
        })?;
        Ok(func)
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        // SAFETY: loaded by cuLibraryLoadData, unloaded once.
        let _ = check("cuLibraryUnload", || unsafe {
            raw::cuLibraryUnload(self.0)
        });
    }
}

/// Kernel parameters in the form cuLaunchKernel wants: one pointer per argument, each pointing to
/// the argument's value. The values live in `slots`, which must outlive the launch.
#[derive(Debug, Clone, Copy)]
pub enum Param {
    Ptr(sys::CUdeviceptr),
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    F32(f32),
    F64(f64),
}

/// Grid, block and dynamic shared memory of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
}

impl Shape {
    pub fn new(grid: [u32; 3], block: [u32; 3]) -> Self {
        Shape {
            grid,
            block,
            shared_bytes: 0,
        }
    }
}

pub fn launch(
    func: sys::CUfunction,
    shape: Shape,
    stream: sys::CUstream,
    params: &mut [Param],
) -> Result<(), GpuError> {
    let Shape {
        grid,
        block,
        shared_bytes,
    } = shape;
    let mut ptrs: Vec<*mut c_void> = params
        .iter_mut()
        .map(|p| match p {
            Param::Ptr(v) => (v as *mut sys::CUdeviceptr).cast(),
            Param::I32(v) => (v as *mut i32).cast(),
            Param::U32(v) => (v as *mut u32).cast(),
            Param::I64(v) => (v as *mut i64).cast(),
            Param::U64(v) => (v as *mut u64).cast(),
            Param::F32(v) => (v as *mut f32).cast(),
            Param::F64(v) => (v as *mut f64).cast(),
        })
        .collect();
    // SAFETY: `ptrs` holds one pointer per kernel parameter, each to a value of the parameter's
    // type that outlives this call (the driver copies them before returning).
    check("cuLaunchKernel", || unsafe {
        raw::cuLaunchKernel(
            func,
            grid[0],
            grid[1],
            grid[2],
            block[0],
            block[1],
            block[2],
            shared_bytes,
            stream,
            ptrs.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    })
}

pub fn occupancy(func: sys::CUfunction, threads: u32, shared_bytes: u32) -> Result<u32, GpuError> {
    let mut blocks = 0;
    // SAFETY: `func` belongs to the current context.
    check("cuOccupancyMaxActiveBlocksPerMultiprocessor", || unsafe {
        raw::cuOccupancyMaxActiveBlocksPerMultiprocessor(
            &mut blocks,
            func,
            threads as i32,
            shared_bytes as usize,
        )
    })?;
    Ok(blocks.max(0) as u32)
}

pub fn sync_stream(stream: sys::CUstream) -> Result<(), GpuError> {
    // SAFETY: the stream is live.
    check("cuStreamSynchronize", || unsafe {
        raw::cuStreamSynchronize(stream)
    })
}

/// Wait for everything on `stream`, for at most `limit` ([`wait_within`]): where a user's kernel
/// may be on it.
pub fn sync_stream_within(
    stream: sys::CUstream,
    what: &str,
    limit: Duration,
) -> Result<(), GpuError> {
    wait_within(what, limit, || {
        // SAFETY: the stream is live.
        finished("cuStreamQuery", || unsafe { raw::cuStreamQuery(stream) })
    })
}

/// An int in pinned host memory mapped into the device: the host raises it to stop a persistent
/// kernel without a launch or a copy.
pub struct MappedFlag {
    host: *mut c_void,
    pub device: sys::CUdeviceptr,
    /// The context current at allocation, made current again to free it.
    ctx: sys::CUcontext,
}

impl MappedFlag {
    pub fn new() -> Result<Self, GpuError> {
        let mut host = std::ptr::null_mut();
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: out-pointer to a local; 4 bytes of pinned memory.
        check("cuMemHostAlloc", || unsafe {
            raw::cuMemHostAlloc(&mut host, 4, flags)
        })?;
        let mut ctx = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        check("cuCtxGetCurrent", || unsafe {
            raw::cuCtxGetCurrent(&mut ctx)
        })?;
        let mut flag = MappedFlag {
            host,
            device: 0,
            ctx,
        };
        flag.set(0);
        let device = &mut flag.device;
        // SAFETY: `host` is mapped pinned memory from cuMemHostAlloc above.
        check("cuMemHostGetDevicePointer", || unsafe {
            raw::cuMemHostGetDevicePointer_v2(device, host, 0)
        })?;
        Ok(flag)
    }

    pub fn set(&self, value: i32) {
        // SAFETY: `host` points to 4 live, aligned bytes of pinned memory; volatile because the
        // GPU reads it concurrently.
        unsafe { std::ptr::write_volatile(self.host.cast::<i32>(), value) };
    }

    /// Make `stream` wait until the flag holds at least `value` (`cuStreamWaitValue32`, GEQ).
    /// Work enqueued after the wait starts only when the host raises the flag, so the host's own
    /// enqueueing, however late it is preempted, happens before the GPU reaches that work.
    pub fn wait_on(&self, stream: sys::CUstream, value: u32) -> Result<(), GpuError> {
        let geq = sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32;
        // SAFETY: `device` maps 4 bytes of pinned host memory that outlive the stream's work (the
        // owner synchronises before dropping the flag).
        check("cuStreamWaitValue32", || unsafe {
            raw::cuStreamWaitValue32_v2(stream, self.device, value, geq)
        })
    }
}

impl Drop for MappedFlag {
    fn drop(&mut self) {
        // Freed in its own context, whatever is current on this thread (often none, as when
        // the session is dropped): with none the driver refuses and the memory stays pinned.
        let _current = (!self.ctx.is_null())
            .then(|| Current::push(self.ctx).ok())
            .flatten();
        // SAFETY: allocated by cuMemHostAlloc, freed once; no kernel reads it any more (the owner
        // synchronises the stressor's stream before dropping).
        let _ = check("cuMemFreeHost", || unsafe { raw::cuMemFreeHost(self.host) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_that_poison_the_process_are_faults_and_others_call_errors() {
        for code in [
            CUresult::CUDA_ERROR_ASSERT,
            CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
            CUresult::CUDA_ERROR_HARDWARE_STACK_ERROR,
            CUresult::CUDA_ERROR_INVALID_PC,
            CUresult::CUDA_ERROR_CONTAINED,
            CUresult::CUDA_ERROR_TENSOR_MEMORY_LEAK,
            CUresult::CUDA_ERROR_MPS_CLIENT_TERMINATED,
            CUresult::CUDA_ERROR_EXTERNAL_DEVICE,
        ] {
            assert!(is_sticky(code), "{code:?}");
        }
        for code in [
            CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
            CUresult::CUDA_ERROR_INVALID_VALUE,
            CUresult::CUDA_ERROR_NOT_SUPPORTED,
        ] {
            assert!(!is_sticky(code), "{code:?}");
        }
    }

    /// A wait on a launch ends when the launch does, passes the driver's errors through, and
    /// gives up at its limit with an error that names the work (no driver is needed: the query
    /// is a stand-in).
    #[test]
    fn a_wait_on_a_launch_ends_with_it_or_at_its_limit() {
        let mut polls = 0;
        let done = wait_within("a timed launch", Duration::from_secs(60), || {
            polls += 1;
            Ok(polls == 3)
        });
        assert!(done.is_ok() && polls == 3, "{done:?} after {polls} polls");
        let failed = wait_within("a timed launch", Duration::from_secs(60), || {
            Err(GpuError::Fault("illegal address".into()))
        });
        assert!(matches!(failed, Err(GpuError::Fault(_))), "{failed:?}");
        let limit = Duration::from_millis(20);
        let started = Instant::now();
        let hung = wait_within("a timed launch", limit, || Ok(false));
        assert!(started.elapsed() >= limit);
        match hung {
            Err(GpuError::Hung(why)) => {
                assert!(why.starts_with("a timed launch had not finished"), "{why}");
                assert!(why.contains("launch time limit"), "{why}");
            }
            other => panic!("not a hang: {other:?}"),
        }
    }

    /// The driver's code arrives as an integer: a code the bindings name becomes their
    /// `CUresult` (success, not ready, a sticky fault), one they do not name (CUDA 13.0's 36, a
    /// newer driver's) is a device fault saying so, never an enum value outside its variants; a
    /// missing symbol is a call error.
    #[test]
    fn driver_codes_are_named_before_they_become_an_enum() {
        assert!(raw::KNOWN_CODES.windows(2).all(|w| w[0] < w[1]));
        assert!(check("cuInit", || 0).is_ok());
        assert_eq!(finished("cuEventQuery", || 600).ok(), Some(false));
        assert_eq!(finished("cuEventQuery", || 0).ok(), Some(true));
        assert!(matches!(
            check("cuLaunchKernel", || 700),
            Err(GpuError::Fault(_))
        ));
        assert!(matches!(
            check("cuMemAlloc", || 2),
            Err(GpuError::Driver { .. })
        ));
        match check("cuLaunchKernel", || 36) {
            Err(GpuError::Fault(why)) => assert!(why.contains("CUDA error 36"), "{why}"),
            other => panic!("{other:?}"),
        }
        match finished("cuStreamQuery", || 917) {
            Err(GpuError::Fault(why)) => assert!(why.contains("do not name"), "{why}"),
            other => panic!("{other:?}"),
        }
        // The latch's wait keeps its fallback to the gate kernel.
        let refused = check("cuStreamWaitValue32", || 917);
        assert!(
            matches!(refused, Err(GpuError::Driver { .. })),
            "{refused:?}"
        );
        let missing = check("cuGreenCtxCreate", || {
            panic!("Missing symbol cuGreenCtxCreate")
        });
        assert!(
            matches!(missing, Err(GpuError::Driver { .. })),
            "{missing:?}"
        );
    }
}
