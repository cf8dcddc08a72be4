//! The method against the first real H200: campaigns `a` and `b` in
//! `calibration/datasets/h200-2026-11-24/`, two processes one after the other on one card
//! (`docs/hardware-validation.md`, section 5). Calibrated on `a` as the daemon calibrates
//! (planner, sweep, heavy-tail screen, `a`'s own delay probe), every bound is held against every
//! launch of `b` at every size, 17 sizes of 8 kernels.
//!
//! These are real launches, and the test can fail: without the allowance for the typical time
//! moving between processes, one bound is under a launch of the second process.

use std::process::Command;

const DATASET: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/calibration/datasets/h200-2026-11-24"
);

/// `wcetctl --json evaluate --methods wcetd`, calibrated on `a` and scored on `b`, with `extra`
/// arguments: (pairs scored, (kernel, sms, bound, largest launch) wherever a bound is below a
/// launch of `b`).
fn a_scored_on_b(extra: &[&str]) -> (usize, Vec<(String, u64, u64, u64)>) {
    let out = Command::new(env!("CARGO_BIN_EXE_wcetctl"))
        .current_dir(DATASET)
        .args(["--json", "evaluate", "--methods", "wcetd"])
        .args(["--samples", "a/samples-isolated.csv.gz"])
        .args(["--holdout", "b/samples-isolated.csv.gz"])
        .args(["--geometry", "a/geometry.csv"])
        .args(["--delays", "a/delays.csv.gz"])
        .args(extra)
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

/// The default on a dataset recorded on a real GPU (its stamp says `cuda`) is the daemon's
/// there: 2% for the typical time in another process.
#[test]
fn every_bound_holds_against_every_launch_of_a_second_process() {
    let (scored, under) = a_scored_on_b(&[]);
    assert_eq!(scored, 8 * 17, "every kernel at every size of the H200");
    assert!(under.is_empty(), "bounds under a real launch: {under:?}");
}

/// What the allowance is for: bfs at 8 SMs ran 1.02% slower in `b` than in `a`, where `a`'s
/// spread was 0.1%, and without the allowance its bound is under a launch of `b`.
#[test]
fn without_the_process_shift_a_second_process_exceeds_a_bound() {
    let (_, under) = a_scored_on_b(&["--process-shift", "0"]);
    assert!(
        under.iter().any(|(k, sms, _, _)| k == "bfs" && *sms == 8),
        "expected bfs at 8 SMs under a launch of b without the allowance: {under:?}"
    );
}
