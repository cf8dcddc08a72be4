//! One batch on a real device, and what is kept between batches. Owns the [`Gpu`] implementation
//! of [`CudaGpu`].
//!
//! The first batch of a kernel on a partition prepares it: the whole algorithm runs at the check
//! size and is compared with the CPU reference (a kernel broken on this device or partition is
//! never timed as a fast one), then the configured problem is uploaded and its setup launches run.
//! That [`Prepared`] state is kept for later batches of the same kernel and partition, so no batch
//! starts from fresh allocations, a cold TLB or a regenerated input. Every batch still warms up
//! with at least one untimed launch, so a host gap between batches is never in a sample.

use cudarc::driver::sys;

use super::driver::{
    launch, launch_timeout, leak_if_hung, occupancy, sync_stream, sync_stream_within, Current,
    DeviceBuffer, Event, Library, MappedFlag, Param, Shape,
};
use super::green::GreenContext;
use super::suite::{self, Arg, Launch, Plan};
use super::{
    library, partition, CudaGpu, Session, STRESSOR_BYTES, STRESSOR_MAX_NS, SUPPORT, SUPPORT_SOURCE,
};
use crate::gpu::{Batch, DeviceInfo, Gpu, GpuError, Interference, RunRequest, Telemetry};
use crate::kernels::{Builtin, Geometry, KernelBody, KernelSpec};

/// How long the fallback gate holds the stream before each timed launch, where the driver refuses
/// the latch: far longer than the host needs to enqueue two events and a launch.
const GATE_NS: u64 = 50_000;

/// A kernel's configured problem on one partition: device buffers after setup, the timed step.
pub(super) struct Prepared {
    pub kernel: String,
    /// [`KernelSpec::code_digest`] of what was prepared: after a reload the same name can be
    /// other code (another entry, grid or buffers), which must not run on the old preparation.
    pub code: String,
    pub sms: u32,
    pub ctx: sys::CUcontext,
    pub bufs: Vec<DeviceBuffer>,
    pub step: Step,
    pub geometry: Geometry,
}

/// The timed launch, resolved: function, shape and parameters (buffer pointers included).
pub(super) struct Step {
    pub func: sys::CUfunction,
    pub shape: Shape,
    pub params: Vec<Param>,
}

impl Step {
    fn launch(&self, stream: sys::CUstream) -> Result<(), GpuError> {
        let mut params = self.params.clone();
        launch(self.func, self.shape, stream, &mut params)
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        // Buffers are freed in the context they were allocated in.
        let _current = Current::push(self.ctx);
        self.bufs.clear();
    }
}

fn entry_points(lib: &Library, launches: &[&Launch]) -> Result<Vec<sys::CUfunction>, GpuError> {
    launches.iter().map(|l| lib.function(l.entry)).collect()
}

fn params(l: &Launch, bufs: &[DeviceBuffer]) -> Vec<Param> {
    l.args
        .iter()
        .map(|a| match *a {
            Arg::Buf(b) => Param::Ptr(bufs[b].ptr),
            Arg::I32(v) => Param::I32(v),
            Arg::F32(v) => Param::F32(v),
        })
        .collect()
}

fn run_one(
    func: sys::CUfunction,
    l: &Launch,
    bufs: &[DeviceBuffer],
    stream: sys::CUstream,
) -> Result<(), GpuError> {
    launch(
        func,
        Shape::new(l.grid, l.block),
        stream,
        &mut params(l, bufs),
    )
}

/// Upload a plan's buffers and run `launches` in order on `stream`.
fn upload_and_run(
    lib: &Library,
    plan: &Plan,
    launches: &[&Launch],
    stream: sys::CUstream,
) -> Result<Vec<DeviceBuffer>, GpuError> {
    let funcs = entry_points(lib, launches)?;
    let bufs: Vec<DeviceBuffer> = plan
        .buffers
        .iter()
        .map(|b| DeviceBuffer::upload(b, stream))
        .collect::<Result<_, _>>()?;
    for (l, f) in launches.iter().zip(funcs) {
        run_one(f, l, &bufs, stream)?;
    }
    // Our own kernels, enqueued together: a minute for each.
    let limit = launch_timeout().saturating_mul(launches.len().max(1) as u32);
    match sync_stream_within(stream, "the check's launches", limit) {
        Ok(()) => Ok(bufs),
        Err(e) => Err(leak_if_hung(e, bufs)),
    }
}

/// Run the whole algorithm at the check size and compare with the CPU reference.
fn verify(lib: &Library, name: &str, seed: u64, stream: sys::CUstream) -> Result<(), GpuError> {
    let plan = suite::plan(name, suite::check_size(name), seed, true)?;
    let all: Vec<&Launch> = plan
        .setup
        .iter()
        .chain([&plan.step])
        .chain(&plan.finish)
        .collect();
    let bufs = upload_and_run(lib, &plan, &all, stream)?;
    for c in &plan.checks {
        let got = bufs[c.buffer].download(&c.expected, stream)?;
        suite::compare(name, &got, c)?;
    }
    Ok(())
}

/// Make `kernel` ready to time on the partition of `sms` SMs: a built-in kernel is verified and
/// its configured problem uploaded and set up; a manifest's module is loaded, its buffers
/// filled and its output checked ([`super::manifest`]).
fn prepare(
    session: &mut Session,
    dev: sys::CUdevice,
    total: u32,
    target: super::nvrtc::Target,
    kernel: &KernelSpec,
    sms: u32,
) -> Result<Prepared, GpuError> {
    match &kernel.body {
        KernelBody::Builtin(b) => {
            prepare_builtin(session, dev, total, target, &kernel.name, b, sms)
        }
        KernelBody::Manifest(m) => super::manifest::prepare(session, dev, total, target, m, sms),
        KernelBody::Simulated => Err(GpuError::UnsupportedKernel(kernel.name.clone())),
    }
}

fn prepare_builtin(
    session: &mut Session,
    dev: sys::CUdevice,
    total: u32,
    target: super::nvrtc::Target,
    name: &str,
    b: &Builtin,
    sms: u32,
) -> Result<Prepared, GpuError> {
    if !suite::ENTRY_POINTS.iter().any(|(k, _)| *k == name) {
        return Err(GpuError::UnsupportedKernel(name.to_string()));
    }
    library(&mut session.libraries, name, b.source, target)?;
    let lib = &session.libraries[name];
    let main = &partition(&mut session.partitions, dev, sms, total)?.main;
    let _current = Current::push(main.ctx)?;
    verify(lib, name, b.input_seed, main.stream)?;
    let key = (name.to_string(), b.problem_size, b.input_seed);
    if session.host_plan.as_ref().map(|(k, _)| k) != Some(&key) {
        session.host_plan = None;
        let plan = suite::plan(name, b.problem_size, b.input_seed, false)?;
        session.host_plan = Some((key, plan));
    }
    let plan = &session.host_plan.as_ref().expect("made above").1;
    let setup: Vec<&Launch> = plan.setup.iter().collect();
    let bufs = upload_and_run(lib, plan, &setup, main.stream)?;
    let func = lib.function(plan.step.entry)?;
    Ok(Prepared {
        kernel: name.to_string(),
        code: String::new(),
        sms,
        ctx: main.ctx,
        geometry: Geometry {
            blocks: plan.step.blocks(),
            blocks_per_sm: occupancy(func, plan.step.threads_per_block(), 0)?,
        },
        step: Step {
            func,
            shape: Shape::new(plan.step.grid, plan.step.block),
            params: params(&plan.step, &bufs),
        },
        bufs,
    })
}

/// The memory stressor running on the complementary SMs until dropped.
struct Stressor<'a> {
    rest: &'a GreenContext,
    stop: &'a MappedFlag,
    buf: Option<DeviceBuffer>,
}

impl<'a> Stressor<'a> {
    fn start(
        rest: &'a GreenContext,
        support: &Library,
        stop: &'a MappedFlag,
    ) -> Result<Self, GpuError> {
        let _current = Current::push(rest.ctx)?;
        stop.set(0);
        let stressor = Stressor {
            rest,
            stop,
            buf: Some(DeviceBuffer::alloc(STRESSOR_BYTES)?),
        };
        let func = support.function("wcetd_stressor")?;
        let blocks = occupancy(func, 256, 0)?.max(1) * rest.sms;
        let mut params = [
            Param::Ptr(stressor.buf.as_ref().map_or(0, |b| b.ptr)),
            Param::U64((STRESSOR_BYTES / 16) as u64),
            Param::Ptr(stop.device),
            Param::U64(STRESSOR_MAX_NS),
        ];
        let shape = Shape::new([blocks, 1, 1], [256, 1, 1]);
        if let Err(e) = launch(func, shape, rest.stream, &mut params) {
            stressor.stop.set(1);
            return Err(e);
        }
        Ok(stressor)
    }
}

impl Stressor<'_> {
    /// After a hung launch: the stressor is told to stop, and nothing is freed or waited on.
    fn abandon(self) {
        self.stop.set(1);
        std::mem::forget(self);
    }
}

impl Drop for Stressor<'_> {
    fn drop(&mut self) {
        self.stop.set(1);
        // The buffer must outlive the kernel and is freed in the context it came from.
        let _current = Current::push(self.rest.ctx);
        let _ = sync_stream(self.rest.stream);
        self.buf = None;
    }
}

/// How each timed launch is held until the host has enqueued it.
enum Hold<'a> {
    Latch(&'a MappedFlag),
    Gate(sys::CUfunction),
}

/// Time `launches` launches of `step` after `warmup` untimed ones, one in flight at a time.
fn time_launches(
    step: &mut dyn FnMut() -> Result<(), GpuError>,
    stream: sys::CUstream,
    hold: &Hold<'_>,
    warmup: u32,
    launches: u32,
) -> Result<Vec<u64>, GpuError> {
    let (start, stop) = (Event::new()?, Event::new()?);
    let mut times = Vec::with_capacity(launches as usize);
    if let Hold::Latch(flag) = hold {
        flag.set(0);
    }
    for i in 0..warmup + launches {
        match hold {
            Hold::Latch(flag) => flag.wait_on(stream, i + 1)?,
            Hold::Gate(gate) => launch(
                *gate,
                Shape::new([1, 1, 1], [1, 1, 1]),
                stream,
                &mut [Param::U64(GATE_NS)],
            )?,
        }
        let enqueued = start
            .record(stream)
            .and_then(|()| step())
            .and_then(|()| stop.record(stream));
        if let Hold::Latch(flag) = hold {
            // Raised even when enqueueing failed: a stream left waiting on the latch would
            // hold every later batch on this partition, and the free of its buffers, for good.
            flag.set(i as i32 + 1);
        }
        if let Err(e) = enqueued {
            // What was enqueued drains before the caller drops buffers it may read, and
            // before the next batch lowers the latch again. The user's launch may be among it
            // (only the stop event failed), so the wait is bounded like any other: a launch
            // that does not end is a hang, abandoned by the caller, not a worker blocked for good.
            return Err(
                match sync_stream_within(stream, "a timed launch", launch_timeout()) {
                    Err(hung @ GpuError::Hung(_)) => hung,
                    _ => e,
                },
            );
        }
        stop.wait("a timed launch", launch_timeout())?;
        if i >= warmup {
            times.push(stop.ns_since(&start)?);
        }
    }
    Ok(times)
}

impl CudaGpu {
    fn run_batch(&mut self, kernel: &KernelSpec, request: &RunRequest) -> Result<Batch, GpuError> {
        let (dev, total, target) = (self.dev, self.info.total_sms, self.target);
        let session = &mut self.session;
        let code = kernel.code_digest();
        let ready = session
            .prepared
            .as_ref()
            .is_some_and(|p| p.kernel == kernel.name && p.code == code && p.sms == request.sms);
        if !ready {
            session.prepared = None;
            let mut prepared = prepare(session, dev, total, target, kernel, request.sms)?;
            prepared.code = code;
            session.prepared = Some(prepared);
        }
        library(&mut session.libraries, SUPPORT, SUPPORT_SOURCE, target)?;
        let support = &session.libraries[SUPPORT];
        let part = partition(&mut session.partitions, dev, request.sms, total)?;
        let prepared = session.prepared.as_ref().expect("prepared above");
        let gate;
        let hold = match &session.latch {
            Some(flag) => Hold::Latch(flag),
            None => {
                let _current = Current::push(part.main.ctx)?;
                gate = support.function("wcetd_gate")?;
                Hold::Gate(gate)
            }
        };
        let rest = match request.interference {
            Interference::Contended => part.rest.as_ref().filter(|r| r.sms > 0),
            Interference::Isolated => None,
        };
        let stressor = match rest {
            Some(rest) => {
                let stop = session.stop.as_ref().ok_or_else(|| GpuError::Driver {
                    call: "contended batch",
                    detail: "the stressor's stop flag was lost to a failed reset".into(),
                })?;
                Some(Stressor::start(rest, support, stop)?)
            }
            None => None,
        };
        let _current = Current::push(part.main.ctx)?;
        let warmup = request.warmup.max(1);
        let stream = part.main.stream;
        let mut step = || prepared.step.launch(stream);
        let (times, telemetry) = self
            .monitor
            .during(|| time_launches(&mut step, stream, &hold, warmup, request.launches));
        match (&times, stressor) {
            // Its buffer cannot be freed while the hung launch may run: stopped, and leaked.
            (Err(GpuError::Hung(_)), Some(stressor)) => stressor.abandon(),
            (_, stressor) => drop(stressor),
        }
        Ok(Batch {
            times_ns: times?,
            granted_sms: part.main.sms,
            geometry: Some(prepared.geometry),
            telemetry,
            interference: if rest.is_some() {
                Interference::Contended
            } else {
                Interference::Isolated
            },
            stressor_sms: rest.map_or(0, |r| r.sms),
        })
    }
}

/// Iterations of the delay probe's arithmetic: about 5 µs at Hopper's clocks.
const PROBE_ITERATIONS: i32 = 2_500;
/// The delay probe's buffer: well beyond any L2. Each launch streams a window of
/// [`PROBE_FLOATS_PER_SM`] floats per SM of it, the next launch the next window.
const PROBE_BUFFER_FLOATS: u64 = 64 << 20;
const PROBE_FLOATS_PER_SM: u64 = 64 << 10;

impl CudaGpu {
    fn probe_delays(&mut self, sms: u32, launches: u32) -> Result<Vec<u64>, GpuError> {
        let (dev, total, target) = (self.dev, self.info.total_sms, self.target);
        let session = &mut self.session;
        session.prepared = None;
        library(&mut session.libraries, SUPPORT, SUPPORT_SOURCE, target)?;
        let support = &session.libraries[SUPPORT];
        let main = &partition(&mut session.partitions, dev, sms, total)?.main;
        let _current = Current::push(main.ctx)?;
        let func = support.function("wcetd_delay_probe")?;
        let gate;
        let hold = match &session.latch {
            Some(flag) => Hold::Latch(flag),
            None => {
                gate = support.function("wcetd_gate")?;
                Hold::Gate(gate)
            }
        };
        let buf = DeviceBuffer::alloc(PROBE_BUFFER_FLOATS as usize * 4)?;
        let window = u64::from(main.sms) * PROBE_FLOATS_PER_SM;
        let windows = (PROBE_BUFFER_FLOATS / window).max(1);
        let shape = Shape::new([main.sms * 4, 1, 1], [256, 1, 1]);
        let mut launched = 0u64;
        let mut step = || {
            let offset = (launched % windows) * window;
            launched += 1;
            let mut params = [
                Param::Ptr(buf.ptr),
                Param::U64(offset),
                Param::U64(window),
                Param::I32(PROBE_ITERATIONS),
            ];
            launch(func, shape, main.stream, &mut params)
        };
        let timed = time_launches(&mut step, main.stream, &hold, 10, launches);
        timed.map_err(|e| leak_if_hung(e, buf))
    }
}

/// What a failed batch leaves behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Recovery {
    /// A launch did not end: nothing may be freed, reset or waited on again in this process
    /// ([`CudaGpu::abandon`]).
    Abandon,
    /// A sticky fault poisoned the context: reset the device and drop every cached handle.
    ResetDevice,
    /// The driver refused stream memory operations: time with the gate kernel from now on.
    UseGate,
    /// Anything else: drop the prepared problem so the next batch starts it afresh.
    DropPrepared,
}

pub(super) fn recovery_for(error: &GpuError) -> Recovery {
    match error {
        GpuError::Hung(_) => Recovery::Abandon,
        GpuError::Fault(_) | GpuError::Lost(_) => Recovery::ResetDevice,
        GpuError::Driver {
            call: "cuStreamWaitValue32",
            ..
        } => Recovery::UseGate,
        _ => Recovery::DropPrepared,
    }
}

impl Gpu for CudaGpu {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn run(&mut self, kernel: &KernelSpec, request: &RunRequest) -> Result<Batch, GpuError> {
        self.check_lost()?;
        self.check_partition(request.sms)?;
        let mut result = self.run_batch(kernel, request);
        if let Some(e) = result
            .as_ref()
            .err()
            .filter(|e| recovery_for(e) == Recovery::UseGate)
        {
            tracing::warn!("{e}; holding launches with the gate kernel instead");
            self.session.latch = None;
            self.session.prepared = None;
            result = self.run_batch(kernel, request);
        }
        if let Err(e) = &result {
            match recovery_for(e) {
                Recovery::Abandon => {
                    let at = format!("`{}` at {} SMs", kernel.name, request.sms);
                    return Err(self.abandon(&format!("{at}: {e}")));
                }
                Recovery::ResetDevice => result = Err(self.after_fault(e)),
                // (Refused again with the gate: nothing more to fall back on.)
                Recovery::UseGate | Recovery::DropPrepared => self.session.prepared = None,
            }
        }
        self.evict_idle_partitions(request.sms);
        result
    }

    fn telemetry(&mut self) -> Telemetry {
        self.monitor.read()
    }

    fn delay_probe(&mut self, sms: u32, launches: u32) -> Result<Vec<u64>, GpuError> {
        self.check_lost()?;
        self.check_partition(sms)?;
        match self.probe_delays(sms, launches) {
            Err(e) if recovery_for(&e) == Recovery::Abandon => {
                Err(self.abandon(&format!("the delay probe: {e}")))
            }
            Err(e) if recovery_for(&e) == Recovery::ResetDevice => Err(self.after_fault(&e)),
            other => other,
        }
    }

    fn placement(&self) -> &[crate::gpu::PlacementReport] {
        &self.placement
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_resets_the_device_and_other_errors_only_drop_the_problem() {
        assert_eq!(
            recovery_for(&GpuError::Fault("Xid 79".into())),
            Recovery::ResetDevice
        );
        assert_eq!(
            recovery_for(&GpuError::Driver {
                call: "cuStreamWaitValue32",
                detail: "CUDA_ERROR_NOT_SUPPORTED".into()
            }),
            Recovery::UseGate
        );
        assert_eq!(
            recovery_for(&GpuError::WrongResult {
                kernel: "lud".into(),
                detail: "x".into()
            }),
            Recovery::DropPrepared
        );
        // A hang is never reset or dropped: both would free what the launch may still use.
        assert_eq!(
            recovery_for(&GpuError::Hung("a timed launch".into())),
            Recovery::Abandon
        );
    }
}
