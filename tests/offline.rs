//! `wcetctl fit`, `simulate` and `evaluate` on files, as other tools feed them.

use std::process::Command;

fn wcetctl(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_wcetctl"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn fit_prints_the_bounds_csv_of_the_design_notes() {
    let dir = tempfile::tempdir().unwrap();
    let samples = dir.path().join("s.csv");
    let mut text = String::from("kernel,sms,time_ns,run\n");
    for (m, base) in [(8u32, 8000u64), (16, 4200), (32, 2300), (64, 1400)] {
        for i in 0..40 {
            text.push_str(&format!("k,{m},{},1\n", base + (i * 7) % 50));
        }
    }
    std::fs::write(&samples, text).unwrap();
    let (ok, out, err) = wcetctl(&[
        "fit",
        "--samples",
        samples.to_str().unwrap(),
        "--sizes",
        "8,24,64",
    ]);
    assert!(ok, "{err}");
    let rows: Vec<&str> = out.lines().collect();
    assert_eq!(rows[0], "kernel,sms,bound_ns");
    assert_eq!(rows.len(), 4);
    let bound_at = |m: &str| {
        rows.iter()
            .find(|r| r.starts_with(&format!("k,{m},")))
            .unwrap()
            .split(',')
            .nth(2)
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    assert!(bound_at("8") >= 8049 && bound_at("64") >= 1449);
    assert!(bound_at("24") <= bound_at("8"));
}

#[test]
fn fit_refuses_bad_files_with_what_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let samples = dir.path().join("bad.csv");
    std::fs::write(&samples, "kernel,sms\nk,8\n").unwrap();
    let (ok, out, err) = wcetctl(&[
        "fit",
        "--samples",
        samples.to_str().unwrap(),
        "--sizes",
        "8",
    ]);
    assert!(!ok && out.is_empty());
    assert!(
        err.contains("missing column `time_ns`") && err.contains("kernel,sms,time_ns"),
        "{err}"
    );
    std::fs::write(&samples, "kernel,sms,time_ns\nk,8,-3\n").unwrap();
    let (ok, _, err) = wcetctl(&[
        "fit",
        "--samples",
        samples.to_str().unwrap(),
        "--sizes",
        "8",
    ]);
    assert!(!ok && err.contains("line 2"), "{err}");
}

/// Held-out evaluation on the simulated suite: the project's method has no violation on
/// kernels without heavy tails, and the table lists every method.
#[test]
fn evaluate_scores_every_method_on_held_out_runs() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    for (seed, name) in [("11", "cal.csv"), ("12", "hold.csv")] {
        let out = Command::new(env!("CARGO_BIN_EXE_wcetctl"))
            .args([
                "simulate",
                "--profile",
                "embedded",
                "--seed",
                seed,
                "--geometry-out",
                &p("geo.csv"),
            ])
            .output()
            .unwrap();
        assert!(out.status.success());
        std::fs::write(p(name), out.stdout).unwrap();
    }
    let (ok, out, err) = wcetctl(&[
        "--json",
        "evaluate",
        "--samples",
        &p("cal.csv"),
        "--holdout",
        &p("hold.csv"),
        "--geometry",
        &p("geo.csv"),
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let overall = v["overall"].as_array().unwrap();
    assert_eq!(overall.len(), 6);
    for k in v["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["method"] == "wcetd" && k["kernel"] != "tmatch")
    {
        assert_eq!(k["score"]["violations"], 0, "{}", k["kernel"]);
    }
}
