//! On a machine without an NVIDIA driver: an explicit CUDA backend is refused with a clear
//! message (no panic), and the default backend falls back to the simulator and says so.

use std::process::Command;

#[test]
fn explicit_cuda_without_a_driver_exits_with_a_clear_message() {
    if cudarc_present() {
        eprintln!("skipped: an NVIDIA driver is present on this machine");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_wcetd"))
        .args(["--backend", "cuda", "--state-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no NVIDIA driver found: libcuda could not be loaded"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn the_default_backend_falls_back_to_the_simulator_with_a_warning() {
    if cudarc_present() {
        eprintln!("skipped: an NVIDIA driver is present on this machine");
        return;
    }
    let gpu = wcetd::gpu::open(
        wcetd::gpu::BackendChoice::Auto,
        wcetd::gpu::sim::DeviceProfile::embedded(),
        Default::default(),
    )
    .unwrap();
    assert_eq!(gpu.info().backend, wcetd::gpu::Backend::Sim);
    assert_eq!(gpu.info().total_sms, 16);
}

fn cudarc_present() -> bool {
    [
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        "/usr/lib64/libcuda.so.1",
        "/usr/local/nvidia/lib64/libcuda.so.1",
    ]
    .iter()
    .any(|p| std::path::Path::new(p).exists())
}
