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
    // From one size the published strategies make no bounds: said on standard error, not only
    // as rows of zeros that read like a perfect score.
    let cal = p("cal.csv");
    let (ok, out, err) = wcetctl(&["evaluate", "--samples", &cal, "--calibrate-at", "8"]);
    assert!(ok, "{err}");
    assert!(err.contains("evaluations made no bounds"), "{err}");
    assert!(
        out.contains("fixed-margin        no bounds to score")
            && !out.contains("fixed-margin            0     0"),
        "{out}"
    );
    // Without --holdout the scores are in-sample, and say so; so are held-out files that repeat
    // the calibration runs, concatenated after fresh ones.
    assert!(
        err.contains("no --holdout: the calibration samples score themselves"),
        "{err}"
    );
    let mixed = p("mixed.csv");
    let hold = std::fs::read_to_string(p("hold.csv")).unwrap();
    let calibration = std::fs::read_to_string(&cal).unwrap();
    let rows = calibration
        .lines()
        .skip(1)
        .filter(|l| l.starts_with("needle,"));
    let text: String = hold.lines().chain(rows).map(|l| format!("{l}\n")).collect();
    std::fs::write(&mixed, text).unwrap();
    let (ok, _, err) = wcetctl(&[
        "evaluate",
        "--samples",
        &cal,
        "--holdout",
        &mixed,
        "--methods",
        "wcetd",
    ]);
    assert!(ok, "{err}");
    assert!(
        err.contains("(the same runs, not held out): needle (every size)"),
        "{err}"
    );
    let (_, _, err) = wcetctl(&[
        "evaluate",
        "--samples",
        &cal,
        "--holdout",
        &p("hold.csv"),
        "--methods",
        "wcetd",
    ]);
    assert!(!err.contains("not held out"), "{err}");
    // A method named twice was scored twice and counted twice in its ALL row: refused.
    let (ok, _, err) = wcetctl(&["evaluate", "--samples", &cal, "--methods", "wcetd,wcetd"]);
    assert!(!ok && err.contains("`wcetd` is named twice"), "{err}");
    // A held-out file of other kernels scores nothing: refused.
    let other = p("other.csv");
    std::fs::write(&other, "kernel,sms,time_ns\nnobody,8,1000\n").unwrap();
    let (ok, _, err) = wcetctl(&["evaluate", "--samples", &cal, "--holdout", &other]);
    assert!(!ok && err.contains("share no kernel"), "{err}");
}

fn write_samples(dir: &std::path::Path, per_size: usize) -> String {
    let path = dir.join(format!("s{per_size}.csv"));
    let mut text = String::from("kernel,sms,time_ns\n");
    for (m, base) in [(8u32, 8000u64), (16, 4200), (32, 2300), (64, 1400)] {
        for i in 0..per_size as u64 {
            text.push_str(&format!("k,{m},{}\n", base + (i * 7) % 50));
        }
    }
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

/// The file with two rows per size: refused, naming the size and the minimum, no CSV.
#[test]
fn fit_refuses_sizes_with_too_few_samples() {
    let dir = tempfile::tempdir().unwrap();
    let samples = write_samples(dir.path(), 2);
    let out = Command::new(env!("CARGO_BIN_EXE_wcetctl"))
        .args(["fit", "--samples", &samples, "--sizes", "8,64"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(out.stdout.is_empty());
    assert!(
        err.contains("2 samples at 8 SMs") && err.contains("at least 30"),
        "{err}"
    );
}

/// Thin but acceptable samples: bounds, and on standard error the exceedance they support and a
/// warning with the numbers; `--json` carries provenance, notes and warnings.
#[test]
fn fit_warns_on_thin_samples_and_says_what_they_support() {
    let dir = tempfile::tempdir().unwrap();
    let samples = write_samples(dir.path(), 40);
    let (ok, out, err) = wcetctl(&["fit", "--samples", &samples, "--sizes", "8,24,64"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("kernel,sms,bound_ns\n"), "{out}");
    assert!(
        err.contains("warning: k: at most 40 samples at one size (160 in all)")
            && err.contains("2000"),
        "{err}"
    );
    assert!(err.contains("k: bounds stated at exceedance"), "{err}");
    // Rule 2 without --json: the sizes not measured are named.
    assert!(err.contains("k: fitted (not measured) at 24 SMs"), "{err}");
    let (ok, out, _) = wcetctl(&["--json", "fit", "--samples", &samples, "--sizes", "8,24,64"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let k = &v["kernels"][0];
    assert_eq!(k["kernel"], "k");
    assert!(k["exceedance"].as_f64().unwrap() > 0.0);
    assert_eq!(k["bounds"][0]["provenance"], "measured");
    assert_eq!(k["bounds"][1]["provenance"], "fitted");
    assert!(!k["notes"].as_array().unwrap().is_empty());
    assert!(!k["warnings"].as_array().unwrap().is_empty());
}

/// `plot -o DIR` writes one SVG per kernel on a log axis with the held-out maximum marked; a
/// `.png` name is refused before anything is written.
#[test]
fn plot_writes_one_svg_per_kernel_and_refuses_png() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    for (seed, name) in [("21", "cal.csv"), ("22", "hold.csv")] {
        let out = Command::new(env!("CARGO_BIN_EXE_wcetctl"))
            .args([
                "simulate",
                "--profile",
                "embedded",
                "--seed",
                seed,
                "--launches",
                "60",
            ])
            .output()
            .unwrap();
        assert!(out.status.success());
        std::fs::write(p(name), out.stdout).unwrap();
    }
    let (cal, hold, plots, png) = (p("cal.csv"), p("hold.csv"), p("plots"), p("needle.png"));
    let data = ["--samples", &cal, "--holdout", &hold];
    let mut args = vec!["plot", "needle", "bfs", "-o", &plots];
    args.extend(data);
    let (ok, out, err) = wcetctl(&args);
    assert!(ok, "{err}");
    assert!(
        out.contains("needle.svg") && out.contains("bfs.svg"),
        "{out}"
    );
    let svg = std::fs::read_to_string(dir.path().join("plots/needle.svg")).unwrap();
    assert!(svg.contains("held-out maximum") && svg.contains("log scale"));
    let mut args = vec!["plot", "needle", "-o", &png];
    args.extend(data);
    let out = Command::new(env!("CARGO_BIN_EXE_wcetctl"))
        .args(&args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(err.contains("PNG") && err.contains(".svg"), "{err}");
    assert!(!dir.path().join("needle.png").exists());
}

#[test]
fn evaluate_refuses_sizes_a_kernel_does_not_have() {
    let dir = tempfile::tempdir().unwrap();
    let samples = dir.path().join("s.csv");
    let mut text = String::from("kernel,sms,time_ns\n");
    // `k` has three sizes, `j` lacks 16: asking for 16 must not calibrate `j` on 8 and 32 alone.
    for (kernel, m, base) in [
        ("k", 8u32, 8000u64),
        ("k", 16, 4200),
        ("k", 32, 2300),
        ("j", 8, 9000),
        ("j", 32, 2600),
    ] {
        for i in 0..40 {
            text.push_str(&format!("{kernel},{m},{}\n", base + (i * 7) % 50));
        }
    }
    std::fs::write(&samples, text).unwrap();
    let path = samples.to_str().unwrap();
    let (ok, _, err) = wcetctl(&["evaluate", "--samples", path, "--calibrate-at", "7,16,9"]);
    assert!(!ok, "a table of zeros was reported as a success");
    assert!(
        err.contains("2 of 2 kernels")
            && err.contains("k (no 7, 9)")
            && err.contains("j (no 7, 16, 9)"),
        "{err}"
    );
    let (ok, _, err) = wcetctl(&["evaluate", "--samples", path, "--calibrate-at", "8,16,32"]);
    assert!(!ok, "`j` was calibrated on fewer sizes than asked");
    assert!(
        err.contains("1 of 2 kernels")
            && err.contains("j (no 16)")
            && err.contains("accepted: sizes every kernel has (8, 32)"),
        "{err}"
    );
    let (ok, _, err) = wcetctl(&["evaluate", "--samples", path, "--calibrate-at", "8,32"]);
    assert!(ok, "{err}");
}

/// `--kernel-dir`, as the design notes promise for `simulate`, `fit` and `kernels check`: a
/// manifest's kernel is simulated from its `[sim]` table, its grid and occupancy hint are its
/// geometry in `fit`, and `kernels check` checks the directory as the daemon loads it.
#[test]
fn simulate_fit_and_kernels_check_take_kernel_directories() {
    let dir = tempfile::tempdir().unwrap();
    let kdir = dir.path().join("kernels.d");
    std::fs::create_dir(&kdir).unwrap();
    std::fs::write(
        kdir.join("scale.ptx"),
        ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry scale(\n\t.param .u64 scale_param_0,\n\t.param .u32 scale_param_1\n)\n{\n\tret;\n}\n",
    )
    .unwrap();
    std::fs::write(
        kdir.join("app.scale.toml"),
        "name = \"app.scale\"\nmodule = \"scale.ptx\"\nentry = \"scale\"\ngrid = [4096, 1, 1]\nblock = [256, 1, 1]\nblocks_per_sm = 8\nargs = [{ buffer = 4194304, fill = \"random-f32\" }, { u32 = 1048576 }]\n",
    )
    .unwrap();
    let kdir_arg = kdir.to_str().unwrap();
    let (ok, out, err) = wcetctl(&["kernels", "check", "--kernel-dir", kdir_arg]);
    assert!(ok && out.contains("ok: app.scale"), "{out}{err}");

    let (ok, samples, err) = wcetctl(&[
        "simulate",
        "--profile",
        "embedded",
        "--launches",
        "40",
        "--kernel-dir",
        kdir_arg,
    ]);
    assert!(ok, "{err}");
    assert!(samples.lines().any(|l| l.starts_with("app.scale,")));
    let path = dir.path().join("s.csv");
    std::fs::write(&path, samples).unwrap();
    let fit = |extra: &[&str]| {
        let mut args = vec!["fit", "--samples", path.to_str().unwrap(), "--sizes", "4,8"];
        args.extend_from_slice(extra);
        wcetctl(&args)
    };
    let no_geometry = "app.scale: no launch geometry";
    let (ok, _, err) = fit(&[]);
    assert!(ok && err.contains(no_geometry), "{err}");
    let (ok, out, err) = fit(&["--kernel-dir", kdir_arg]);
    assert!(ok && !err.contains(no_geometry), "{err}");
    assert!(out.lines().any(|l| l.starts_with("app.scale,4,")), "{out}");
    // A second manifest under a built-in's name is refused, as the daemon refuses it (it
    // replaced the built-in's samples).
    let text = std::fs::read_to_string(kdir.join("app.scale.toml")).unwrap();
    std::fs::write(kdir.join("z.toml"), text.replace("app.scale", "lud")).unwrap();
    let (ok, _, err) = wcetctl(&["simulate", "--launches", "40", "--kernel-dir", kdir_arg]);
    assert!(
        !ok && err.contains("z.toml") && err.contains("lud"),
        "{err}"
    );
}

/// One kernel refused does not cost the others their bounds: they are printed, the refused one
/// is named on standard error, and the exit status says not every kernel was bounded (the whole
/// fit stopped at the first refusal).
#[test]
fn fit_prints_the_kernels_it_can_bound_and_names_those_it_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let samples = dir.path().join("s.csv");
    let mut text = String::from("kernel,sms,time_ns\n");
    for (m, base) in [(8u32, 8000u64), (16, 4200), (32, 2300), (64, 1400)] {
        for i in 0..40 {
            text.push_str(&format!("k,{m},{}\n", base + (i * 7) % 50));
        }
    }
    for i in 0..10 {
        text.push_str(&format!("solo,16,{}\n", 5000 + i));
    }
    std::fs::write(&samples, text).unwrap();
    let path = samples.to_str().unwrap();
    let (ok, out, err) = wcetctl(&["fit", "--samples", path, "--sizes", "8,16"]);
    assert!(!ok, "{out}{err}");
    assert!(out.lines().any(|l| l.starts_with("k,8,")), "{out}");
    assert!(
        err.contains("refused: kernel solo: 10 samples at 16 SMs")
            && err.contains("1 of 2 kernels refused"),
        "{err}"
    );
    // The JSON names the refused kernel too, not only standard error.
    let (ok, out, err) = wcetctl(&["--json", "fit", "--samples", path, "--sizes", "8,16"]);
    assert!(!ok, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["kernels"][0]["kernel"], "k", "{out}");
    assert_eq!(v["refused"][0]["kernel"], "solo", "{out}");
    assert!(
        v["refused"][0]["why"]
            .as_str()
            .unwrap()
            .contains("10 samples at 16 SMs"),
        "{out}"
    );
}
