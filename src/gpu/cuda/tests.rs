//! Tests of the CUDA backend that need no GPU (the no-driver path, kernel sources, NVRTC when it
//! is installed) and one ignored test that drives the whole path on a real device.

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
                spec.source.contains(&decl),
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
/// entry points the plans launch.
#[test]
fn kernel_sources_compile_with_nvrtc_when_it_is_installed() {
    // SAFETY: only tries to dlopen libnvrtc.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        eprintln!("libnvrtc not found; skipping the compile check");
        return;
    }
    let mut sources: Vec<(String, &str)> = kernels::builtin_suite()
        .into_iter()
        .map(|k| (k.name.to_string(), k.source))
        .collect();
    sources.push((SUPPORT.to_string(), SUPPORT_SOURCE));
    for (name, source) in sources {
        let ptx = compile(&name, source, Some("compute_90")).unwrap_or_else(|e| panic!("{e}"));
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
    }
}

#[test]
fn nvrtc_architectures_cover_hopper() {
    assert_eq!(nvrtc_arch(9, 0), Some("compute_90"));
    assert_eq!(nvrtc_arch(3, 5), None);
}

/// The whole path on a real GPU: `cargo test -- --ignored real_gpu`.
#[test]
#[ignore = "needs an NVIDIA GPU with driver and NVRTC"]
fn real_gpu_end_to_end() {
    let mut gpu = CudaGpu::open(0).expect("a CUDA device");
    let info = gpu.info().clone();
    eprintln!("{info:?}");
    assert_eq!(info.partition_sizes.last(), Some(&info.total_sms));
    let smallest = info.partition_sizes[0];
    let report = gpu.probe_placement(smallest).unwrap();
    assert!(report.confirmed(), "{report:?}");
    for kernel in kernels::builtin_suite() {
        for interference in [Interference::Isolated, Interference::Contended] {
            let request = RunRequest {
                sms: smallest,
                warmup: 2,
                launches: 5,
                interference,
            };
            let batch = gpu
                .run(&kernel, &request)
                .unwrap_or_else(|e| panic!("{}: {e}", kernel.name));
            assert_eq!(batch.times_ns.len(), 5);
            assert!(
                batch.times_ns.iter().all(|&t| t > 0),
                "{}: {:?}",
                kernel.name,
                batch.times_ns
            );
            assert_eq!(batch.granted_sms, smallest);
            assert!(batch.geometry.unwrap().blocks_per_sm > 0);
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
}
