//! Scoring the method on campaigns recorded on real GPUs (`calibration/datasets/`), shared by
//! the H100 and H200 tests.

use std::process::Command;

/// A launch above its bound: (kernel, SMs, bound, largest held-out launch), in nanoseconds.
pub type Under = (String, u64, u64, u64);

/// `wcetctl --json evaluate --methods wcetd ARGS`, run in `dataset`: (pairs scored, every pair
/// whose bound is below the largest held-out launch at its size).
pub fn scored(dataset: &str, args: &[&str]) -> (usize, Vec<Under>) {
    let out = Command::new(env!("CARGO_BIN_EXE_wcetctl"))
        .current_dir(dataset)
        .args(["--json", "evaluate", "--methods", "wcetd"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut scored = 0;
    let mut under = Vec::new();
    for kernel in report["kernels"].as_array().unwrap() {
        assert!(kernel["error"].is_null(), "{kernel}");
        for pair in kernel["pairs"].as_array().unwrap() {
            scored += 1;
            let (bound, max) = (
                pair["bound_ns"].as_u64().unwrap(),
                pair["holdout_max_ns"].as_u64().unwrap(),
            );
            if bound < max {
                let name = kernel["kernel"].as_str().unwrap().to_string();
                under.push((name, pair["sms"].as_u64().unwrap(), bound, max));
            }
        }
    }
    (scored, under)
}
