//! A user's kernel from a manifest, on a real device: its module loaded as a context-independent
//! library (a .cu compiled with NVRTC to a CUBIN for the device, a .ptx JIT-compiled by the
//! driver, a .cubin or .fatbin as it is), its buffers allocated and filled once per (kernel,
//! partition), its output checked after one launch on freshly filled buffers, and then timed
//! exactly as the built-in suite is (the same latch, events and telemetry, in [`super::run`]).

use std::collections::hash_map::Entry;

use cudarc::driver::sys::{self, CUfunction_attribute};

use super::driver::{
    check, launch_timeout, leak_if_hung, occupancy, sync_stream_within, Current, DeviceBuffer,
    Library, Param, Shape,
};
use super::nvrtc::{self, Image};
use super::raw;
use super::run::{Prepared, Step};
use super::suite::HostBuf;
use super::{partition, Session};
use crate::gpu::GpuError;
use crate::kernels::Geometry;
use crate::manifest::{Arg, Manifest, ModuleKind, OutputCheck};

/// Dynamic shared memory a block gets without asking for more.
const DEFAULT_SHARED_LIMIT: u32 = 48 << 10;

pub(super) fn prepare(
    session: &mut Session,
    dev: sys::CUdevice,
    total: u32,
    target: nvrtc::Target,
    m: &Manifest,
    sms: u32,
) -> Result<Prepared, GpuError> {
    // A changed module is another library: the key carries its hash.
    let key = format!("{}#{}", m.name, &m.module_sha256[..16]);
    if let Entry::Vacant(e) = session.libraries.entry(key.clone()) {
        e.insert(Library::load(&image(m, target)?)?);
    }
    // Earlier versions of the module are unloaded: nothing prepared runs them (the caller
    // dropped the prepared problem), and a daemon whose manifests are edited for months would
    // otherwise keep every version loaded.
    let older = format!("{}#", m.name);
    session
        .libraries
        .retain(|k, _| !k.starts_with(&older) || *k == key);
    let lib = &session.libraries[&key];
    let main = &partition(&mut session.partitions, dev, sms, total)?.main;
    let _current = Current::push(main.ctx)?;
    let func = lib.function(&m.entry)?;
    if m.shared_bytes > DEFAULT_SHARED_LIMIT {
        let attr = CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
        // SAFETY: `func` belongs to the current context; the value is the manifest's request.
        check("cuFuncSetAttribute", || unsafe {
            raw::cuFuncSetAttribute(func, attr, m.shared_bytes as i32)
        })?;
    }
    check_memory(m)?;
    let bufs = fill(m, main.stream)?;
    let step = Step {
        func,
        shape: Shape {
            grid: m.grid,
            block: m.block,
            shared_bytes: m.shared_bytes,
        },
        params: params(m, &bufs),
    };
    if let Some(c) = &m.check {
        if let Err(e) = step_once(&step, main.stream) {
            return Err(leak_if_hung(e, bufs));
        }
        check_output(m, c, &bufs, main.stream)?;
    }
    let blocks_per_sm = match m.blocks_per_sm {
        Some(hint) => hint,
        None => occupancy(func, m.threads_per_block(), m.shared_bytes)?,
    };
    if blocks_per_sm == 0 {
        return Err(GpuError::Driver {
            call: "cuOccupancyMaxActiveBlocksPerMultiprocessor",
            detail: format!(
                "`{}` cannot run a block of {} threads with {} bytes of shared memory on this device",
                m.entry,
                m.threads_per_block(),
                m.shared_bytes
            ),
        });
    }
    Ok(Prepared {
        kernel: m.name.clone(),
        code: String::new(),
        sms,
        ctx: main.ctx,
        bufs,
        step,
        geometry: Geometry {
            blocks: m.blocks(),
            blocks_per_sm,
        },
    })
}

fn image(m: &Manifest, target: nvrtc::Target) -> Result<Image, GpuError> {
    let read = || {
        crate::manifest::read_module(&m.module).map_err(|detail| GpuError::Driver {
            call: "module",
            detail,
        })
    };
    Ok(match m.module_kind {
        ModuleKind::Cu => {
            let source = String::from_utf8_lossy(&read()?).into_owned();
            nvrtc::compile(&m.name, &source, target)?
        }
        ModuleKind::Ptx => Image::Ptx(String::from_utf8_lossy(&read()?).into_owned()),
        ModuleKind::Cubin | ModuleKind::Fatbin => Image::Cubin(read()?),
    })
}

/// Refuse buffers the device cannot hold, before allocating any.
fn check_memory(m: &Manifest) -> Result<(), GpuError> {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: two out-pointers to locals; a context is current.
    check("cuMemGetInfo", || unsafe {
        raw::cuMemGetInfo_v2(&mut free, &mut total)
    })?;
    let need = m.buffer_bytes();
    if need > free as u64 {
        return Err(GpuError::Driver {
            call: "cuMemAlloc",
            detail: format!(
                "`{}` asks for {need} bytes of buffers; the device has {free} of {total} bytes free",
                m.name
            ),
        });
    }
    Ok(())
}

/// Allocate and fill every buffer argument, in order.
fn fill(m: &Manifest, stream: sys::CUstream) -> Result<Vec<DeviceBuffer>, GpuError> {
    let contents = m.host_buffers().map_err(|detail| GpuError::Driver {
        call: "fill",
        detail,
    })?;
    contents
        .into_iter()
        .map(|data| DeviceBuffer::upload(&HostBuf::Bytes(data), stream))
        .collect()
}

fn params(m: &Manifest, bufs: &[DeviceBuffer]) -> Vec<Param> {
    let mut next = bufs.iter();
    m.args
        .iter()
        .map(|a| match *a {
            Arg::Buffer { .. } => Param::Ptr(next.next().map_or(0, |b| b.ptr)),
            Arg::I32(v) => Param::I32(v),
            Arg::U32(v) => Param::U32(v),
            Arg::I64(v) => Param::I64(v),
            Arg::U64(v) => Param::U64(v),
            Arg::F32(v) => Param::F32(v),
            Arg::F64(v) => Param::F64(v),
        })
        .collect()
}

fn step_once(step: &Step, stream: sys::CUstream) -> Result<(), GpuError> {
    let mut params = step.params.clone();
    super::driver::launch(step.func, step.shape, stream, &mut params)?;
    sync_stream_within(stream, "the output check's launch", launch_timeout())
}

/// The buffer `c` names (the check counts buffers among all arguments; `bufs` holds only them).
fn check_output(
    m: &Manifest,
    c: &OutputCheck,
    bufs: &[DeviceBuffer],
    stream: sys::CUstream,
) -> Result<(), GpuError> {
    let (arg, expected) = match c {
        OutputCheck::Sha256 { buffer, .. } | OutputCheck::Reference { buffer, .. } => (*buffer, c),
    };
    let index = m.args[..arg]
        .iter()
        .filter(|a| matches!(a, Arg::Buffer { .. }))
        .count();
    let HostBuf::Bytes(got) = bufs[index].download(&HostBuf::Bytes(Vec::new()), stream)? else {
        unreachable!("download keeps the buffer type")
    };
    let wrong = |detail: String| GpuError::WrongResult {
        kernel: m.name.clone(),
        detail,
    };
    match expected {
        OutputCheck::Sha256 { sha256, .. } => {
            let seen = crate::manifest::sha256(&got);
            if &seen != sha256 {
                return Err(wrong(format!(
                    "output check failed: args[{arg}] has SHA-256 {seen} after one launch, the manifest expects {sha256} (wrong arguments, a different input, or a kernel that is not deterministic)"
                )));
            }
        }
        OutputCheck::Reference {
            file, tolerance, ..
        } => {
            // At most the output's length and one byte: a longer reference is refused below.
            let want = crate::manifest::read_regular(file, got.len() as u64 + 1)
                .map_err(|e| wrong(format!("reference {} cannot be read: {e}", file.display())))?;
            if want.len() != got.len() {
                return Err(wrong(format!(
                    "output check failed: args[{arg}] holds {} bytes after one launch, the reference {} has {}",
                    got.len(),
                    file.display(),
                    want.len()
                )));
            }
            let value = |b: &[u8]| f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            let bad = want
                .chunks_exact(4)
                .zip(got.chunks_exact(4))
                .enumerate()
                .find(|(_, (w, g))| {
                    let (w, g) = (value(w), value(g));
                    // NaN where a number is expected is a mismatch too.
                    let close = (g - w).abs() <= tolerance * w.abs().max(1.0);
                    !close
                });
            if let Some((i, (w, g))) = bad {
                return Err(wrong(format!(
                    "output check failed: args[{arg}][{i}] = {} after one launch, the reference {} has {} (tolerance {tolerance})",
                    value(g),
                    file.display(),
                    value(w)
                )));
            }
        }
    }
    Ok(())
}
