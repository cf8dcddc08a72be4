//! Generators are deterministic under a seed, CPU references compute what the kernels claim, and
//! plans launch what the algorithms need.

use super::*;

fn all() -> impl Iterator<Item = &'static str> {
    ENTRY_POINTS.iter().map(|(k, _)| *k)
}

#[test]
fn same_seed_same_inputs_other_seed_other_inputs() {
    for k in all() {
        let size = check_size(k);
        assert_eq!(
            plan(k, size, 7, false).unwrap().buffers,
            plan(k, size, 7, false).unwrap().buffers,
            "{k}"
        );
        assert_ne!(
            plan(k, size, 7, false).unwrap().buffers,
            plan(k, size, 8, false).unwrap().buffers,
            "{k}"
        );
    }
}

#[test]
fn plans_use_declared_entry_points_and_valid_buffers() {
    for (k, entries) in ENTRY_POINTS {
        let p = plan(k, check_size(k), 1, true).unwrap();
        assert!(!p.checks.is_empty(), "{k} has no check");
        for l in p.setup.iter().chain([&p.step]).chain(&p.finish) {
            assert!(entries.contains(&l.entry), "{k}: {}", l.entry);
            assert!(l.blocks() > 0 && l.threads_per_block() > 0 && l.threads_per_block() <= 1024);
            for a in &l.args {
                if let Arg::Buf(b) = a {
                    assert!(*b < p.buffers.len(), "{k}: buffer {b}");
                }
            }
        }
        for c in &p.checks {
            assert_eq!(
                p.buffers[c.buffer].len(),
                c.expected.len(),
                "{k}: check shape"
            );
        }
    }
    assert!(matches!(
        plan("nope", 8, 0, false),
        Err(GpuError::UnsupportedKernel(_))
    ));
}

#[test]
fn timed_plans_at_configured_sizes_skip_references() {
    for k in crate::kernels::builtin_suite() {
        // Generating the configured inputs takes a minute unoptimised; a sixteenth of the size
        // exercises the same code there, and release test runs use the configured sizes.
        let b = k.builtin().unwrap();
        let size = if cfg!(debug_assertions) {
            b.problem_size / 16
        } else {
            b.problem_size
        };
        let p = plan(&k.name, size, b.input_seed, false).unwrap();
        assert!(p.checks.is_empty());
        assert!(p.step.blocks() > 0);
    }
}

#[test]
fn needle_reference_matches_a_hand_computed_alignment() {
    // n = 1: one cell, max(0 + 5, -10 - 10, -10 - 10) = 5.
    let score = vec![0, -10, -10, 0];
    let sim = vec![0, 0, 0, 5];
    assert_eq!(needle_reference(1, &sim, &score)[3], 5);
    let p = plan("needle", 64, 3, false).unwrap();
    assert_eq!(
        p.setup.len() + 1 + p.finish.len(),
        7,
        "2 * tiles - 1 tile diagonals"
    );
    assert_eq!(
        p.step.grid[0], 4,
        "the longest diagonal has one block per tile"
    );
}

#[test]
fn gaussian_reference_leaves_an_upper_triangular_system_with_the_same_solution() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let (a, b) = gaussian_inputs(8, &mut rng);
    let (u, c) = gaussian_reference(8, &a, &b);
    let n = 8;
    let mut x = vec![0.0f32; n];
    for r in (0..n).rev() {
        let s: f32 = (r + 1..n).map(|k| u[r * n + k] * x[k]).sum();
        x[r] = (c[r] - s) / u[r * n + r];
        for k in 0..r {
            assert!(u[r * n + k].abs() < 1e-5, "below-diagonal entry left");
        }
    }
    for r in 0..n {
        let lhs: f32 = (0..n).map(|k| a[r * n + k] * x[k]).sum();
        assert!((lhs - b[r]).abs() < 1e-4);
    }
}

#[test]
fn lud_reference_factors_the_matrix() {
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let (a, _) = gaussian_inputs(16, &mut rng);
    let lu = lud_reference(16, &a);
    let n = 16;
    for r in 0..n {
        for c in 0..n {
            let s: f32 = (0..=r.min(c))
                .map(|k| {
                    if k == r {
                        lu[k * n + c]
                    } else {
                        lu[r * n + k] * lu[k * n + c]
                    }
                })
                .sum();
            assert!(
                (s - a[r * n + c]).abs() < 1e-3,
                "L*U differs from A at ({r}, {c})"
            );
        }
    }
}

#[test]
fn bfs_reference_gives_levels_and_the_plan_covers_them() {
    // 0 -> 1 -> 2, 3 unreachable.
    assert_eq!(bfs_reference(&[0, 1, 2, 2, 2], &[1, 2]), vec![0, 1, 2, -1]);
    let p = plan("bfs", 4096, 5, true).unwrap();
    let HostBuf::I32(cost) = &p.checks[0].expected else {
        panic!()
    };
    let levels = *cost.iter().max().unwrap() as usize;
    let expands = p
        .setup
        .iter()
        .chain([&p.step])
        .chain(&p.finish)
        .filter(|l| l.entry == "bfs_expand")
        .count();
    assert_eq!(expands, levels);
}

#[test]
fn hotspot_and_srad_references_are_sane() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let temp = vec![330.0; 16];
    let out = hotspot_reference(4, &temp, &[0.0; 16]);
    assert!(
        out.iter().all(|&t| t < 330.0 && t > 300.0),
        "a uniform chip cools towards ambient"
    );
    let (img, q0) = srad_inputs(16, &mut rng);
    assert!(q0 > 0.0);
    let (coef, next) = srad_reference(16, &img, q0);
    assert!(coef.iter().all(|c| (0.0..=1.0).contains(c)));
    assert!(next.iter().all(|v| v.is_finite()));
}

#[test]
fn tmatch_finds_the_planted_template() {
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let (image, tmpl) = tmatch_inputs(48, &mut rng);
    let scores = tmatch_reference(48, &image, &tmpl);
    let best = scores.iter().cloned().fold(f32::MIN, f32::max);
    assert!(best > 0.9, "best NCC {best}");
    assert!(scores.iter().all(|s| (-1.001..=1.001).contains(s)));
}

#[test]
fn backprop_reference_sums_each_block() {
    let input = vec![1.0f32; 16];
    let weights = vec![0.5f32; 256];
    let (partial, adjusted) = backprop_reference(&input, &weights, &[0.0; 256], &[1.0; 16]);
    assert!(partial.iter().all(|&p| p == 8.0));
    assert!(adjusted.iter().all(|&w| (w - 0.8).abs() < 1e-6));
}

#[test]
fn compare_rejects_wrong_results_and_accepts_rounding() {
    let check = close(0, vec![1.0, 2.0, 3.0], 1e-3);
    assert!(compare("k", &HostBuf::F32(vec![1.0, 2.0001, 3.0]), &check).is_ok());
    let err = compare("k", &HostBuf::F32(vec![1.0, 0.0, 3.0]), &check).unwrap_err();
    assert!(matches!(err, GpuError::WrongResult { .. }), "{err}");
    assert!(err.to_string().contains("[1] = 0 (expected 2)"), "{err}");
    assert!(compare(
        "k",
        &HostBuf::I32(vec![1]),
        &exact(0, HostBuf::I32(vec![2]))
    )
    .is_err());
    assert!(compare(
        "k",
        &HostBuf::I32(vec![1, 2]),
        &exact(0, HostBuf::I32(vec![1]))
    )
    .is_err());
    let lenient = Check {
        allowed_mismatch: 0.34,
        ..check
    };
    assert!(compare("k", &HostBuf::F32(vec![1.0, 0.0, 3.0]), &lenient).is_ok());
}
