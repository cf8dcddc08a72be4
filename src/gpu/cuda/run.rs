//! One batch on a real device: check the kernel against its CPU reference on the partition,
//! prepare the configured problem, then time the step launch by launch, with or without the
//! stressor on the complementary SMs. Owns the [`Gpu`] implementation of [`CudaGpu`].

use std::collections::HashMap;

use cudarc::driver::sys;

use super::driver::{
    launch, occupancy, set_current, sync_stream, DeviceBuffer, Event, Library, MappedFlag, Param,
};
use super::green::GreenContext;
use super::suite::{self, Arg, Launch, Plan};
use super::{CudaGpu, GATE_NS, STRESSOR_BYTES, STRESSOR_MAX_NS, SUPPORT, SUPPORT_SOURCE};
use crate::gpu::{Batch, DeviceInfo, Gpu, GpuError, Interference, RunRequest, Telemetry};
use crate::kernels::{Geometry, KernelSpec};

type Functions = HashMap<&'static str, sys::CUfunction>;

/// The entry points a plan uses, resolved in the current context before anything is timed.
fn functions(lib: &Library, plan: &Plan) -> Result<Functions, GpuError> {
    let mut map = HashMap::new();
    for l in plan.setup.iter().chain([&plan.step]).chain(&plan.finish) {
        if !map.contains_key(l.entry) {
            map.insert(l.entry, lib.function(l.entry)?);
        }
    }
    Ok(map)
}

fn run_one(
    funcs: &Functions,
    l: &Launch,
    bufs: &[DeviceBuffer],
    stream: sys::CUstream,
) -> Result<(), GpuError> {
    let mut params: Vec<Param> = l
        .args
        .iter()
        .map(|a| match *a {
            Arg::Buf(b) => Param::Ptr(bufs[b].ptr),
            Arg::I32(v) => Param::I32(v),
            Arg::F32(v) => Param::F32(v),
        })
        .collect();
    launch(funcs[l.entry], l.grid, l.block, stream, &mut params)
}

fn upload(plan: &Plan) -> Result<Vec<DeviceBuffer>, GpuError> {
    plan.buffers.iter().map(DeviceBuffer::upload).collect()
}

/// Run the whole algorithm at the check size and compare with the CPU reference, so that a
/// kernel that is broken on this device or partition is never timed as a fast one.
fn verify(lib: &Library, kernel: &KernelSpec, stream: sys::CUstream) -> Result<(), GpuError> {
    let plan = suite::plan(
        kernel.name,
        suite::check_size(kernel.name),
        kernel.input_seed,
        true,
    )?;
    let funcs = functions(lib, &plan)?;
    let bufs = upload(&plan)?;
    for l in plan.setup.iter().chain([&plan.step]).chain(&plan.finish) {
        run_one(&funcs, l, &bufs, stream)?;
    }
    sync_stream(stream)?;
    for c in &plan.checks {
        let got = bufs[c.buffer].download(&c.expected)?;
        suite::compare(kernel.name, &got, c)?;
    }
    Ok(())
}

/// The memory stressor running on the complementary SMs until dropped.
struct Stressor<'a> {
    rest: &'a GreenContext,
    flag: MappedFlag,
    _buf: DeviceBuffer,
}

impl<'a> Stressor<'a> {
    fn start(
        rest: &'a GreenContext,
        support: &Library,
        back_to: sys::CUcontext,
    ) -> Result<Self, GpuError> {
        set_current(rest.ctx)?;
        let flag = MappedFlag::new()?;
        let buf = DeviceBuffer::alloc(STRESSOR_BYTES)?;
        let func = support.function("wcetd_stressor")?;
        let blocks = occupancy(func, 256)?.max(1) * rest.sms;
        let mut params = [
            Param::Ptr(buf.ptr),
            Param::U64((STRESSOR_BYTES / 16) as u64),
            Param::Ptr(flag.device),
            Param::U64(STRESSOR_MAX_NS),
        ];
        let stressor = Stressor {
            rest,
            flag,
            _buf: buf,
        };
        launch(func, [blocks, 1, 1], [256, 1, 1], rest.stream, &mut params)?;
        set_current(back_to)?;
        Ok(stressor)
    }
}

impl Drop for Stressor<'_> {
    fn drop(&mut self) {
        self.flag.set(1);
        // The buffer and flag must outlive the kernel and are freed in the context they came from.
        let _ = sync_stream(self.rest.stream);
        let _ = set_current(self.rest.ctx);
    }
}

/// Time `launches` launches of the step after `warmup` untimed ones, one in flight at a time.
fn time_step(
    step: sys::CUfunction,
    gate: sys::CUfunction,
    l: &Launch,
    bufs: &[DeviceBuffer],
    stream: sys::CUstream,
    request: &RunRequest,
) -> Result<Vec<u64>, GpuError> {
    let funcs: Functions = [(l.entry, step)].into();
    let (start, stop) = (Event::new()?, Event::new()?);
    let mut times = Vec::with_capacity(request.launches as usize);
    for i in 0..request.warmup + request.launches {
        launch(
            gate,
            [1, 1, 1],
            [1, 1, 1],
            stream,
            &mut [Param::U64(GATE_NS)],
        )?;
        start.record(stream)?;
        run_one(&funcs, l, bufs, stream)?;
        stop.record(stream)?;
        stop.synchronize()?;
        if i >= request.warmup {
            times.push(stop.ns_since(&start)?);
        }
    }
    Ok(times)
}

impl Gpu for CudaGpu {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn run(&mut self, kernel: &KernelSpec, request: &RunRequest) -> Result<Batch, GpuError> {
        self.check_partition(request.sms)?;
        if !suite::ENTRY_POINTS.iter().any(|(k, _)| *k == kernel.name) {
            return Err(GpuError::UnsupportedKernel(kernel.name.to_string()));
        }
        self.library(SUPPORT, SUPPORT_SOURCE)?;
        self.library(kernel.name, kernel.source)?;
        let (dev, total) = (self.dev, self.info.total_sms);
        let part = super::partition(&mut self.partitions, dev, request.sms, total)?;
        let (lib, support) = (&self.libraries[kernel.name], &self.libraries[SUPPORT]);
        set_current(part.main.ctx)?;
        verify(lib, kernel, part.main.stream)?;

        let plan = suite::plan(kernel.name, kernel.problem_size, kernel.input_seed, false)?;
        let funcs = functions(lib, &plan)?;
        let bufs = upload(&plan)?;
        for l in &plan.setup {
            run_one(&funcs, l, &bufs, part.main.stream)?;
        }
        sync_stream(part.main.stream)?;
        let step = funcs[plan.step.entry];
        let geometry = Geometry {
            blocks: plan.step.blocks(),
            blocks_per_sm: occupancy(step, plan.step.threads_per_block())?,
        };
        let gate = support.function("wcetd_gate")?;

        let telemetry_before = self.monitor.read();
        let stressor = match (request.interference, &part.rest) {
            (Interference::Contended, Some(rest)) => {
                Some(Stressor::start(rest, support, part.main.ctx)?)
            }
            _ => None,
        };
        let times = time_step(step, gate, &plan.step, &bufs, part.main.stream, request);
        drop(stressor);
        set_current(part.main.ctx)?;
        drop(bufs);
        let times_ns = times?;
        Ok(Batch {
            times_ns,
            granted_sms: part.main.sms,
            geometry: Some(geometry),
            telemetry_before,
            telemetry_after: self.monitor.read(),
        })
    }

    fn telemetry(&mut self) -> Telemetry {
        self.monitor.read()
    }
}
