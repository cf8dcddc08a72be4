//! Tests of the CUDA backend that need no GPU (the no-driver path, kernel sources, NVRTC when it
//! is installed) and two ignored ones on a real device: the whole path, and a launch that never
//! ends (which keeps its SMs until its process exits, so it runs alone, last).

use super::*;
use crate::gpu::{Gpu, Interference, RunRequest};
use crate::kernels;

fn driver_present() -> bool {
    // SAFETY: only tries to dlopen libcuda.
    unsafe { sys::is_culib_present() }
}

#[test]
fn without_libcuda_open_is_a_no_driver_error_not_a_panic() {
    if driver_present() {
        eprintln!("libcuda is present here; the no-driver path cannot be exercised");
        return;
    }
    let err = CudaGpu::open(0)
        .err()
        .expect("open must fail without a driver");
    assert!(matches!(err, GpuError::NoDriver));
    assert_eq!(
        err.to_string(),
        "no NVIDIA driver found: libcuda could not be loaded"
    );
}

#[test]
fn every_kernel_source_defines_its_entry_points() {
    let suite = kernels::builtin_suite();
    assert_eq!(suite.len(), suite::ENTRY_POINTS.len());
    for (name, entries) in suite::ENTRY_POINTS {
        let spec = kernels::find(name).unwrap_or_else(|| panic!("{name} is not in the catalogue"));
        for entry in *entries {
            let decl = format!("extern \"C\" __global__ void {entry}(");
            assert!(
                spec.builtin().unwrap().source.contains(&decl),
                "kernels/{name}.cu lacks `{decl}`"
            );
        }
    }
    for entry in ["wcetd_smid_probe", "wcetd_stressor", "wcetd_gate"] {
        assert!(SUPPORT_SOURCE.contains(&format!("extern \"C\" __global__ void {entry}(")));
    }
    assert!(SUPPORT_SOURCE.contains("mov.u32 %0, %%smid;"));
}

/// Runs wherever libnvrtc can be loaded (no GPU needed): every source compiles to PTX with the
/// entry points the plans launch, and to a CUBIN for Hopper.
#[test]
fn kernel_sources_compile_with_nvrtc_when_it_is_installed() {
    if !nvrtc::available() {
        eprintln!("libnvrtc not found; skipping the compile check");
        return;
    }
    let mut sources: Vec<(String, &str)> = kernels::builtin_suite()
        .into_iter()
        .map(|k| (k.name.clone(), k.builtin().unwrap().source))
        .collect();
    sources.push((SUPPORT.to_string(), SUPPORT_SOURCE));
    for (name, source) in sources {
        let nvrtc::Image::Ptx(ptx) =
            nvrtc::compile(&name, source, nvrtc::Target::Ptx(90)).unwrap_or_else(|e| panic!("{e}"))
        else {
            panic!("asked for PTX")
        };
        let entries = suite::ENTRY_POINTS
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, e)| *e)
            .unwrap_or(&[]);
        for entry in entries {
            assert!(
                ptx.contains(&format!(".entry {entry}(")),
                "{name}: no entry {entry} in PTX"
            );
        }
        let cubin = nvrtc::compile(&name, source, nvrtc::Target::Cubin(90)).unwrap();
        assert!(matches!(cubin, nvrtc::Image::Cubin(ref b) if b.starts_with(b"\x7fELF")));
    }
}

/// The whole path on a real GPU: `cargo test -- --ignored real_gpu --skip real_gpu_hang` (or the
/// carried test binary with the same arguments and `--nocapture`: `device-run.sh check`). Prints
/// what it saw, for the hardware notes.
#[test]
#[ignore = "needs an NVIDIA GPU with driver and NVRTC"]
fn real_gpu_end_to_end() {
    let mut gpu = CudaGpu::open(0).expect("a CUDA device");
    let info = gpu.info().clone();
    eprintln!("{info:?}");
    eprintln!("nvrtc {:?}, target {:?}", nvrtc::version(), gpu.target);
    assert_eq!(info.partition_sizes.last(), Some(&info.total_sms));
    assert!(info.unusable_sizes.is_empty(), "{:?}", info.unusable_sizes);
    assert_ne!(info.fingerprint.clock_policy, "unknown");
    assert_ne!(info.fingerprint.driver, "unknown");
    for report in gpu.placement() {
        assert_eq!(report.problem(), None, "{report:?}");
    }
    assert_eq!(gpu.placement().len(), info.partition_sizes.len());
    assert!(
        gpu.session.latch.is_some(),
        "the host-released latch is in use"
    );

    let (smallest, whole) = (info.partition_sizes[0], info.total_sms);
    let below_whole = info.partition_sizes[info.partition_sizes.len() - 2];
    for kernel in kernels::builtin_suite() {
        for (sms, interference, applied) in [
            (smallest, Interference::Contended, Interference::Contended),
            (smallest, Interference::Isolated, Interference::Isolated),
            (
                below_whole,
                Interference::Contended,
                Interference::Contended,
            ),
            (whole, Interference::Contended, Interference::Isolated),
            (whole, Interference::Isolated, Interference::Isolated),
        ] {
            let request = RunRequest {
                sms,
                warmup: 2,
                launches: 20,
                interference,
            };
            let batch = gpu
                .run(&kernel, &request)
                .unwrap_or_else(|e| panic!("{} at {sms}: {e}", kernel.name));
            let again = gpu
                .run(&kernel, &request)
                .expect("a second batch reuses the problem");
            let mut times = batch.times_ns.clone();
            times.extend(&again.times_ns);
            times.sort_unstable();
            eprintln!(
                "{:<9} {sms:>3} SMs {interference:<9} -> {:<9} stressor {:>3}: median {:>9} ns, max {:>9} ns, clock {:?} MHz, {:?}",
                kernel.name,
                batch.interference,
                batch.stressor_sms,
                times[times.len() / 2],
                times[times.len() - 1],
                batch.telemetry.sm_clock_mhz,
                batch.telemetry.throttle_reasons,
            );
            assert_eq!(batch.times_ns.len(), 20);
            assert!(batch.times_ns.iter().all(|&t| t > 0));
            assert_eq!(batch.granted_sms, sms);
            assert_eq!(batch.interference, applied);
            assert_eq!(batch.stressor_sms > 0, applied == Interference::Contended);
            assert!(batch.geometry.unwrap().blocks_per_sm > 0);
            if sms == whole && interference == Interference::Isolated {
                assert!(
                    times[times.len() / 2] >= 10_000,
                    "{}: the timed step must take at least 10 µs on the whole device",
                    kernel.name
                );
            }
        }
    }
    assert!(matches!(
        gpu.run(
            &kernels::find("lud").unwrap(),
            &RunRequest {
                sms: 1,
                warmup: 0,
                launches: 1,
                interference: Interference::Isolated
            }
        ),
        Err(GpuError::InvalidPartition { .. })
    ));

    // The device's rare delays: a fixed amount of work, timed like every launch.
    let probe = gpu.delay_probe(whole, 20_000).expect("delay probe");
    let mut sorted = probe.clone();
    sorted.sort_unstable();
    let median = sorted[sorted.len() / 2];
    let over = |us: u64| probe.iter().filter(|&&t| t > median + us * 1000).count();
    eprintln!(
        "delay probe: median {median} ns, max {} ns, over +1 us {}, +2 us {}, +4 us {}",
        sorted[sorted.len() - 1],
        over(1),
        over(2),
        over(4)
    );
    assert!(
        (10_000..60_000).contains(&median),
        "probe median {median} ns"
    );

    // A sticky fault is either reset (and the next batch runs) or reported lost, after which
    // every call fails the same way and the daemon restarts.
    let fault = gpu.inject_fault();
    eprintln!("injected fault: {fault:?}");
    // The trap is waited on by polling, as a user's launch is: the sticky error must come back
    // from the query as a fault, not as a wait that ran to the launch time limit.
    assert!(
        !gpu.primary.abandoned,
        "the trap was taken for a hang: {fault:?}"
    );
    let hotspot = RunRequest {
        sms: smallest,
        warmup: 1,
        launches: 5,
        interference: Interference::Isolated,
    };
    let after = gpu.run(&kernels::find("hotspot").unwrap(), &hotspot);
    match fault {
        Err(GpuError::Fault(_)) => assert!(after.is_ok(), "after the reset: {after:?}"),
        Err(GpuError::Lost(_)) => assert!(matches!(after, Err(GpuError::Lost(_))), "{after:?}"),
        other => panic!("a trap must fault: {other:?}"),
    }
}

/// A manifest kernel that is the support library's gate kernel, spinning for `spin_ns`: written
/// under `dir` as `NAME.toml` beside `gate.cu`.
fn gate_kernel(dir: &std::path::Path, file: &str, spin_ns: u64) -> kernels::KernelSpec {
    std::fs::write(dir.join("gate.cu"), SUPPORT_SOURCE).unwrap();
    let toml = format!(
        "name = \"test.gate\"\nmodule = \"gate.cu\"\nentry = \"wcetd_gate\"\n\
         grid = [1, 1, 1]\nblock = [1, 1, 1]\nargs = [{{ u64 = {spin_ns} }}]\n"
    );
    let path = dir.join(format!("{file}.toml"));
    std::fs::write(&path, toml).unwrap();
    kernels::KernelSpec::from_manifest(crate::manifest::load(&path).unwrap())
}

/// The hang test's kernel passes the manifest checks here, so no lent GPU's time is lost on it.
#[test]
fn the_hang_tests_gate_kernel_is_a_valid_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let spec = gate_kernel(dir.path(), "never", i64::MAX as u64);
    let m = spec.manifest().expect("a manifest kernel");
    assert_eq!(m.entry, "wcetd_gate");
    assert_eq!(m.args, [crate::manifest::Arg::U64(i64::MAX as u64)]);
}

/// The launch time limit on a real GPU: a timed launch that never ends, contended at the smallest
/// partition (so the stressor is abandoned too), loses the device within the limit and about a
/// second, so that nothing on the way out waited on the launch. Run alone and last, in a process
/// of its own (`device-run.sh hang`): the hung kernel keeps its SMs until the process exits.
#[test]
#[ignore = "needs an NVIDIA GPU; hangs a kernel until the process exits: run alone, last"]
fn real_gpu_hang() {
    let limit = Duration::from_secs(5);
    set_launch_timeout(limit);
    let mut gpu = CudaGpu::open(0).expect("a CUDA device");
    let dir = tempfile::tempdir().unwrap();
    let request = RunRequest {
        sms: gpu.info().partition_sizes[0],
        warmup: 1,
        launches: 1,
        interference: Interference::Contended,
    };
    // The same module ending after 1 µs first: compiled, loaded and the partition made, so the
    // hung run below times the launch and what follows it, not NVRTC.
    let ends = gate_kernel(dir.path(), "ends", 1_000);
    let batch = gpu
        .run(&ends, &request)
        .expect("the gate kernel given an end");
    assert_eq!(batch.interference, Interference::Contended);
    // 2^63 - 1 ns (292 years: the most TOML holds) is a launch that never ends.
    let never = gate_kernel(dir.path(), "never", i64::MAX as u64);
    let started = Instant::now();
    let hung = gpu.run(&never, &request);
    let after = gpu.run(&ends, &request);
    drop(gpu);
    let took = started.elapsed();
    eprintln!("hung launch: {hung:?} after {took:?} (limit {limit:?}); then {after:?}");
    match &hung {
        Err(GpuError::Lost(why)) => assert!(
            why.contains("had not finished after") && why.contains("abandoned"),
            "{why}"
        ),
        other => panic!("a launch that never ends must lose the device: {other:?}"),
    }
    assert!(matches!(after, Err(GpuError::Lost(_))), "{after:?}");
    assert!(
        took >= limit && took < limit + Duration::from_secs(1),
        "the device was given up {took:?} after the launch, with a limit of {limit:?}"
    );
}
