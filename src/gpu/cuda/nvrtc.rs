//! NVRTC, loaded by hand: the run-time compiler that turns the suite's CUDA C into a CUBIN for the
//! device's own architecture (`sm_XY`), so that the driver never JIT-compiles PTX at load.
//!
//! Why not cudarc's NVRTC bindings: they look only for the library names of the CUDA version they
//! were built for (`libnvrtc.so.12` and a bare `libnvrtc.so` that only toolkits install), so a
//! system with the CUDA 13 runtime alone (`libnvrtc.so.13`) had no compiler, and a missing symbol
//! panics inside them. Here the candidates are listed in one place ([`library_candidates`]), the
//! eight symbols the daemon uses are resolved once, and every failure is a [`GpuError`].
//!
//! It needs no GPU: the host side compiles the built-in suite to PTX with it too, for the static
//! work its predictions are made from (`crate::workload`).
//!
//! PTX is kept as a fallback for a device the NVRTC at hand cannot target as a CUBIN. PTX must be
//! JIT-compiled by the driver, which refuses PTX newer than itself, so that path first compares
//! NVRTC's version with the driver's and says what to install when they do not fit.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

use crate::gpu::GpuError;

type Program = *mut c_void;
type Status = c_int;

/// The NVRTC entry points the daemon uses, resolved from one loaded library.
struct Api {
    _lib: libloading::Library,
    path: String,
    version: unsafe extern "C" fn(*mut c_int, *mut c_int) -> Status,
    supported_archs_count: Option<unsafe extern "C" fn(*mut c_int) -> Status>,
    supported_archs: Option<unsafe extern "C" fn(*mut c_int) -> Status>,
    create: unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> Status,
    compile: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> Status,
    log_size: unsafe extern "C" fn(Program, *mut usize) -> Status,
    log: unsafe extern "C" fn(Program, *mut c_char) -> Status,
    cubin_size: unsafe extern "C" fn(Program, *mut usize) -> Status,
    cubin: unsafe extern "C" fn(Program, *mut c_char) -> Status,
    ptx_size: unsafe extern "C" fn(Program, *mut usize) -> Status,
    ptx: unsafe extern "C" fn(Program, *mut c_char) -> Status,
    destroy: unsafe extern "C" fn(*mut Program) -> Status,
    error_string: unsafe extern "C" fn(Status) -> *const c_char,
}

// SAFETY: NVRTC's API is thread-safe (programs are independent); the function pointers are plain
// addresses into a library that stays loaded for the life of the process.
unsafe impl Send for Api {}
unsafe impl Sync for Api {}

/// Where NVRTC is looked for, in order: `$WCETD_NVRTC` (a path), the sonames of the CUDA 13 and 12
/// runtimes, the toolkit's unversioned name, then the toolkit's default directory.
pub fn library_candidates(env_override: Option<&str>) -> Vec<String> {
    let mut names: Vec<String> = env_override
        .filter(|p| !p.is_empty())
        .map(|p| vec![p.to_string()])
        .unwrap_or_default();
    for soname in ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"] {
        names.push(soname.to_string());
    }
    for dir in [
        "/usr/local/cuda/lib64",
        "/usr/local/cuda/targets/x86_64-linux/lib",
    ] {
        names.push(format!("{dir}/libnvrtc.so.13"));
        names.push(format!("{dir}/libnvrtc.so.12"));
    }
    names
}

fn api() -> Result<&'static Api, GpuError> {
    static API: OnceLock<Result<Api, String>> = OnceLock::new();
    API.get_or_init(load)
        .as_ref()
        .map_err(|detail| GpuError::Driver {
            call: "nvrtc",
            detail: detail.clone(),
        })
}

fn load() -> Result<Api, String> {
    let candidates = library_candidates(std::env::var("WCETD_NVRTC").ok().as_deref());
    let mut tried = Vec::new();
    for name in &candidates {
        // SAFETY: loading NVRTC runs no initialisers with preconditions of ours.
        match unsafe { libloading::Library::new(name) } {
            Ok(lib) => return resolve(lib, name),
            Err(e) => tried.push(format!("{name} ({e})")),
        }
    }
    Err(format!(
        "libnvrtc could not be loaded; tried {}. Install the CUDA NVRTC runtime (CUDA 12 or 13: \
         package cuda-nvrtc-13-0 or the nvidia-cuda-nvrtc wheel) or point WCETD_NVRTC at libnvrtc.so",
        tried.join(", ")
    ))
}

fn resolve(lib: libloading::Library, path: &str) -> Result<Api, String> {
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: the symbol has the C signature declared in `Api` (nvrtc.h, CUDA 12 and 13).
            *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                .map_err(|e| format!("{path} lacks {}: {e}", $name))?
        };
    }
    macro_rules! optional {
        ($name:literal) => {
            // SAFETY: as above; absent before NVRTC 11.2.
            unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                .ok()
                .map(|s| *s)
        };
    }
    Ok(Api {
        path: path.to_string(),
        version: sym!("nvrtcVersion"),
        supported_archs_count: optional!("nvrtcGetNumSupportedArchs"),
        supported_archs: optional!("nvrtcGetSupportedArchs"),
        create: sym!("nvrtcCreateProgram"),
        compile: sym!("nvrtcCompileProgram"),
        log_size: sym!("nvrtcGetProgramLogSize"),
        log: sym!("nvrtcGetProgramLog"),
        cubin_size: sym!("nvrtcGetCUBINSize"),
        cubin: sym!("nvrtcGetCUBIN"),
        ptx_size: sym!("nvrtcGetPTXSize"),
        ptx: sym!("nvrtcGetPTX"),
        destroy: sym!("nvrtcDestroyProgram"),
        error_string: sym!("nvrtcGetErrorString"),
        _lib: lib,
    })
}

/// Whether an NVRTC library can be loaded here (no GPU needed): the built-in suite's PTX is
/// counted with it (`workload`), and tests that compile skip without one.
pub fn available() -> bool {
    api().is_ok()
}

/// NVRTC's (major, minor) version and the library it was loaded from.
pub fn version() -> Result<((u32, u32), String), GpuError> {
    let api = api()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two out-pointers to locals.
    let status = unsafe { (api.version)(&mut major, &mut minor) };
    check(api, "nvrtcVersion", status)?;
    Ok(((major as u32, minor as u32), api.path.clone()))
}

/// Compute capabilities (times ten) this NVRTC can emit CUBINs for; empty when it cannot say.
pub fn supported_archs() -> Vec<u32> {
    let Ok(api) = api() else {
        return Vec::new();
    };
    let (Some(count), Some(list)) = (api.supported_archs_count, api.supported_archs) else {
        return Vec::new();
    };
    let mut n = 0;
    // SAFETY: out-pointer to a local.
    if unsafe { count(&mut n) } != 0 || n <= 0 {
        return Vec::new();
    }
    let mut archs = vec![0 as c_int; n as usize];
    // SAFETY: room for exactly `n` entries, as the count call said.
    if unsafe { list(archs.as_mut_ptr()) } != 0 {
        return Vec::new();
    }
    archs.into_iter().map(|a| a.max(0) as u32).collect()
}

/// What the driver will load: machine code for the device, or PTX for its JIT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Image {
    Cubin(Vec<u8>),
    Ptx(String),
}

impl Image {
    /// The bytes `cuLibraryLoadData` takes (PTX NUL-terminated).
    pub fn bytes(&self) -> Vec<u8> {
        match self {
            Image::Cubin(b) => b.clone(),
            Image::Ptx(p) => {
                let mut b = p.clone().into_bytes();
                b.push(0);
                b
            }
        }
    }
}

/// The target NVRTC is asked for, for a device of compute capability `cc` (times ten).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// `--gpu-architecture=sm_XY`: a CUBIN, no driver JIT.
    Cubin(u32),
    /// `--gpu-architecture=compute_XY`: PTX for the driver to JIT.
    Ptx(u32),
}

impl Target {
    /// A CUBIN for the device when NVRTC lists its architecture (or cannot list any); otherwise
    /// PTX for the newest virtual architecture NVRTC has that the device can run.
    pub fn choose(cc: u32, supported: &[u32]) -> Target {
        if supported.is_empty() || supported.contains(&cc) {
            return Target::Cubin(cc);
        }
        let below = supported.iter().copied().filter(|&a| a <= cc).max();
        Target::Ptx(below.unwrap_or(cc))
    }

    pub fn option(self) -> String {
        match self {
            Target::Cubin(cc) => format!("--gpu-architecture=sm_{cc}"),
            Target::Ptx(cc) => format!("--gpu-architecture=compute_{cc}"),
        }
    }
}

/// PTX from NVRTC `nvrtc` is refused by a driver older than it (`CUDA_ERROR_UNSUPPORTED_PTX_VERSION`);
/// the driver's CUDA version comes from `cuDriverGetVersion` (e.g. 12080 for 12.8).
pub fn ptx_compatible(nvrtc: (u32, u32), driver_version: u32) -> Result<(), String> {
    let driver = (driver_version / 1000, (driver_version % 1000) / 10);
    if nvrtc <= driver {
        return Ok(());
    }
    Err(format!(
        "NVRTC {}.{} emits PTX that the driver (CUDA {}.{}) cannot load; install NVRTC {}.{} or \
         older (set WCETD_NVRTC to its libnvrtc.so) or a driver for CUDA {}.{} or newer",
        nvrtc.0, nvrtc.1, driver.0, driver.1, driver.0, driver.1, nvrtc.0, nvrtc.1
    ))
}

/// A CUBIN from NVRTC `nvrtc` loads on a driver of the same CUDA major version or a newer one
/// (CUDA's compatibility is promised within a major version: CUDA 13 needs the r580 driver), so
/// NVRTC 13 is refused on a CUDA 12 driver, with what to do, rather than failing at load.
pub fn cubin_compatible(nvrtc: (u32, u32), driver_version: u32) -> Result<(), String> {
    let driver_major = driver_version / 1000;
    if nvrtc.0 <= driver_major {
        return Ok(());
    }
    Err(format!(
        "NVRTC {}.{} is of a newer CUDA major version than the driver (CUDA {}.{}), which cannot be \
         relied on to load what it compiles; set WCETD_NVRTC to the libnvrtc.so.{driver_major} of \
         CUDA {driver_major}, or install a driver for CUDA {}",
        nvrtc.0,
        nvrtc.1,
        driver_major,
        (driver_version % 1000) / 10,
        nvrtc.0
    ))
}

/// Compile `source` for `target` (default precision: no fast math, so CPU checks stay tight).
pub fn compile(name: &str, source: &str, target: Target) -> Result<Image, GpuError> {
    let api = api()?;
    let src = c_string(source, "nvrtcCreateProgram")?;
    let file = c_string(&format!("{name}.cu"), "nvrtcCreateProgram")?;
    let mut prog: Program = std::ptr::null_mut();
    // SAFETY: NUL-terminated source and name alive for the call; no headers.
    let status = unsafe {
        (api.create)(
            &mut prog,
            src.as_ptr(),
            file.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    check(api, "nvrtcCreateProgram", status)?;
    let program = Owned { api, prog };
    let options = [target.option(), "--std=c++17".to_string()];
    let options: Vec<CString> = options
        .iter()
        .map(|o| c_string(o, "nvrtcCompileProgram"))
        .collect::<Result<_, _>>()?;
    let pointers: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
    // SAFETY: `pointers` holds NUL-terminated options alive for the call.
    let status = unsafe { (api.compile)(program.prog, pointers.len() as c_int, pointers.as_ptr()) };
    if status != 0 {
        return Err(GpuError::Driver {
            call: "nvrtcCompileProgram",
            detail: format!(
                "{name}.cu ({}): {}\n{}",
                target.option(),
                describe(api, status),
                program.log()
            ),
        });
    }
    match target {
        Target::Cubin(_) => Ok(Image::Cubin(program.output(
            api.cubin_size,
            api.cubin,
            "nvrtcGetCUBIN",
        )?)),
        Target::Ptx(_) => {
            let mut bytes = program.output(api.ptx_size, api.ptx, "nvrtcGetPTX")?;
            while bytes.last() == Some(&0) {
                bytes.pop();
            }
            Ok(Image::Ptx(String::from_utf8_lossy(&bytes).into_owned()))
        }
    }
}

/// A program destroyed on drop.
struct Owned {
    api: &'static Api,
    prog: Program,
}

impl Owned {
    fn log(&self) -> String {
        let mut size = 0;
        // SAFETY: out-pointer to a local; the program is live.
        if unsafe { (self.api.log_size)(self.prog, &mut size) } != 0 || size == 0 {
            return String::new();
        }
        let mut buf = vec![0 as c_char; size];
        // SAFETY: `buf` holds the `size` bytes NVRTC said the log needs.
        if unsafe { (self.api.log)(self.prog, buf.as_mut_ptr()) } != 0 {
            return String::new();
        }
        // SAFETY: NVRTC NUL-terminates the log within `size`.
        unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .trim()
            .to_string()
    }

    fn output(
        &self,
        size_of: unsafe extern "C" fn(Program, *mut usize) -> Status,
        get: unsafe extern "C" fn(Program, *mut c_char) -> Status,
        call: &'static str,
    ) -> Result<Vec<u8>, GpuError> {
        let mut size = 0;
        // SAFETY: out-pointer to a local; the program compiled.
        check(self.api, call, unsafe { size_of(self.prog, &mut size) })?;
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` holds the `size` bytes NVRTC reported.
        check(self.api, call, unsafe {
            get(self.prog, buf.as_mut_ptr().cast())
        })?;
        Ok(buf)
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: created by nvrtcCreateProgram, destroyed once.
        unsafe { (self.api.destroy)(&mut self.prog) };
    }
}

fn c_string(text: &str, call: &'static str) -> Result<CString, GpuError> {
    CString::new(text).map_err(|_| GpuError::Driver {
        call,
        detail: "text contains a NUL byte".into(),
    })
}

fn describe(api: &Api, status: Status) -> String {
    // SAFETY: returns a pointer to a static NUL-terminated string (or null).
    let text = unsafe { (api.error_string)(status) };
    if text.is_null() {
        format!("NVRTC error {status}")
    } else {
        // SAFETY: non-null, static and NUL-terminated per nvrtc.h.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    }
}

fn check(api: &Api, call: &'static str, status: Status) -> Result<(), GpuError> {
    if status == 0 {
        Ok(())
    } else {
        Err(GpuError::Driver {
            call,
            detail: describe(api, status),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_13_and_12_runtimes_are_both_looked_for_after_the_override() {
        let names = library_candidates(Some("/opt/nvrtc/libnvrtc.so.12"));
        assert_eq!(names[0], "/opt/nvrtc/libnvrtc.so.12");
        let at = |n: &str| names.iter().position(|x| x == n).unwrap();
        assert!(at("libnvrtc.so.13") < at("libnvrtc.so.12"));
        assert!(at("libnvrtc.so.12") < at("libnvrtc.so"));
        assert_eq!(library_candidates(Some(""))[0], "libnvrtc.so.13");
    }

    #[test]
    fn a_listed_architecture_gets_a_cubin_and_an_unlisted_one_ptx() {
        let hopper_era = [75, 80, 86, 87, 89, 90, 100, 120];
        assert_eq!(Target::choose(90, &hopper_era), Target::Cubin(90));
        assert_eq!(
            Target::choose(90, &hopper_era).option(),
            "--gpu-architecture=sm_90"
        );
        assert_eq!(Target::choose(103, &hopper_era), Target::Ptx(100));
        assert_eq!(
            Target::choose(103, &hopper_era).option(),
            "--gpu-architecture=compute_100"
        );
        assert_eq!(
            Target::choose(90, &[]),
            Target::Cubin(90),
            "unknown list: try the CUBIN"
        );
    }

    #[test]
    fn ptx_newer_than_the_driver_is_refused_with_what_to_install() {
        assert!(ptx_compatible((12, 8), 12080).is_ok());
        assert!(ptx_compatible((12, 4), 13000).is_ok());
        let err = ptx_compatible((12, 9), 12080).unwrap_err();
        assert!(err.contains("NVRTC 12.9"), "{err}");
        assert!(err.contains("driver (CUDA 12.8)"), "{err}");
        assert!(err.contains("install NVRTC 12.8 or older"), "{err}");
    }

    #[test]
    fn a_cubin_compiler_of_a_newer_major_than_the_driver_is_refused() {
        assert!(cubin_compatible((13, 0), 13000).is_ok());
        assert!(
            cubin_compatible((12, 9), 12020).is_ok(),
            "minor versions are compatible"
        );
        assert!(cubin_compatible((12, 8), 13000).is_ok());
        let err = cubin_compatible((13, 0), 12080).unwrap_err();
        assert!(
            err.contains("WCETD_NVRTC") && err.contains("libnvrtc.so.12"),
            "{err}"
        );
    }

    #[test]
    fn ptx_images_are_nul_terminated_and_cubins_are_not_touched() {
        assert_eq!(Image::Ptx(".version 8.8".into()).bytes().last(), Some(&0));
        assert_eq!(Image::Cubin(vec![1, 2]).bytes(), vec![1, 2]);
    }
}
