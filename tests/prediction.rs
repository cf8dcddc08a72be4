//! Predictions in the daemon and on the command line: reported beside bounds, labelled as
//! predictions, and never changing a served bound.

mod common;

use std::collections::HashMap;

use common::{wcetctl, Daemon};
use zbus::OwnedVariant;

type Info = HashMap<String, OwnedVariant>;

fn u64_of(info: &Info, key: &str) -> u64 {
    u64::try_from(
        info.get(key)
            .unwrap_or_else(|| panic!("no {key}: {info:?}")),
    )
    .unwrap_or_else(|_| panic!("{key} is not a t: {info:?}"))
}

fn text_of(info: &Info, key: &str) -> String {
    <&str>::try_from(
        info.get(key)
            .unwrap_or_else(|| panic!("no {key}: {info:?}")),
    )
    .unwrap()
    .to_string()
}

/// Everything about a served bound except when it was made and the prediction beside it.
fn bound_part(info: &Info) -> Vec<String> {
    let sms = u32::try_from(&info["partition_sms"]).unwrap();
    [
        "bound_ns",
        "samples",
        "observed_max_ns",
        "typical_ns",
        "mean_ns",
    ]
    .iter()
    .map(|k| u64_of(info, k).to_string())
    .chain([sms.to_string()])
    .chain(
        ["provenance", "method", "law", "tail", "interference"]
            .iter()
            .map(|k| text_of(info, k)),
    )
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounds_are_identical_with_prediction_on_and_off() {
    let on = Daemon::start(&[]).await;
    let off = Daemon::start(&["--no-prediction"]).await;
    assert_eq!(on.wait_job(1).await.0, "done");
    assert_eq!(off.wait_job(1).await.0, "done");
    let (b_on, b_off) = (on.bounds().await, off.bounds().await);
    let kernels = b_on.list_kernels().await.unwrap();
    assert_eq!(kernels, b_off.list_kernels().await.unwrap());
    for k in &kernels {
        let curve = b_on.get_curve(k).await.unwrap();
        assert_eq!(curve, b_off.get_curve(k).await.unwrap(), "{k}");
        for &(sms, _) in &curve {
            let i_on = b_on.get_bound_info(k, sms).await.unwrap();
            let i_off = b_off.get_bound_info(k, sms).await.unwrap();
            assert_eq!(bound_part(&i_on), bound_part(&i_off), "{k} at {sms}");
            // On: a prediction at every size, labelled as one. Off: none, and it says so.
            assert!(u64_of(&i_on, "predicted_typical_ns") > 0, "{k} {sms}");
            assert!(text_of(&i_on, "prediction").contains("never a bound"));
            assert_eq!(u64_of(&i_off, "predicted_typical_ns"), 0);
            assert!(text_of(&i_off, "prediction").starts_with("none"));
            // The measured typical and mean time where measured, 0 elsewhere.
            let (n, typical, mean) = (
                u64_of(&i_on, "samples"),
                u64_of(&i_on, "typical_ns"),
                u64_of(&i_on, "mean_ns"),
            );
            let max = u64_of(&i_on, "observed_max_ns");
            if n > 0 {
                assert!(
                    typical > 0 && typical <= max && mean > 0 && mean <= max,
                    "{k} {sms}"
                );
            } else {
                assert_eq!((typical, mean), (0, 0), "{k} {sms}");
            }
        }
    }
    let (ok, out, err) = wcetctl(on.bus.address(), &["curve", "hotspot"]);
    assert!(ok, "{err}");
    for column in ["typical_ns", "mean_ns", "predicted_ns", "never a bound"] {
        assert!(out.contains(column), "{column} missing from:\n{out}");
    }
}

const AXPY_PTX: &str = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry axpy(\n\t.param .u64 axpy_param_0,\n\t.param .u32 axpy_param_1\n)\n{\n\tld.global.f32 \t%f1, [%rd1];\n\tfma.rn.f32 \t%f2, %f1, %f1, %f1;\n\tst.global.f32 \t[%rd1], %f2;\n\tret;\n}\n";

/// A manifest `NAME.toml` in `dir` running `entry` of `module` on 4,096 blocks of 256 threads
/// over a 4 MiB buffer.
fn write_manifest(dir: &std::path::Path, name: &str, module: &str, entry: &str) {
    std::fs::write(
        dir.join(format!("{name}.toml")),
        format!(
            "name = \"{name}\"\nmodule = \"{module}\"\nentry = \"{entry}\"\ngrid = [4096, 1, 1]\nblock = [256, 1, 1]\nargs = [{{ buffer = 4194304, fill = \"random-f32\" }}, {{ u32 = 1048576 }}]\n"
        ),
    )
    .unwrap();
}

/// A kernel of one's own has a predicted curve as the built-in suite does: from its PTX's
/// instruction mix where the module is PTX (or CUDA C and NVRTC is here), from its grid and
/// buffers otherwise; a kernel added
/// by a reload gets one too, a kernel known only from imported samples says why it has none, and
/// no bound of theirs changes with prediction off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernels_of_ones_own_are_predicted_and_their_bounds_do_not_depend_on_it() {
    let kdir = tempfile::tempdir().unwrap();
    std::fs::write(kdir.path().join("axpy.ptx"), AXPY_PTX).unwrap();
    std::fs::write(
        kdir.path().join("copy.cu"),
        "extern \"C\" __global__ void copy(float *a, unsigned n) { a[threadIdx.x] = 0.0f; }\n",
    )
    .unwrap();
    write_manifest(kdir.path(), "app.axpy", "axpy.ptx", "axpy");
    write_manifest(kdir.path(), "app.copy", "copy.cu", "copy");
    let dir = kdir.path().to_str().unwrap();
    let on = Daemon::start(&["--no-initial-calibration", "--kernel-dir", dir]).await;
    let off = Daemon::start(&[
        "--no-initial-calibration",
        "--kernel-dir",
        dir,
        "--no-prediction",
    ])
    .await;
    let mine = ["app.axpy", "app.copy"];
    assert_eq!(on.recalibrate(&mine).await.0, "done");
    assert_eq!(off.recalibrate(&mine).await.0, "done");
    let (b_on, b_off) = (on.bounds().await, off.bounds().await);
    for (k, from) in [
        (
            "app.axpy",
            "PTX of `axpy`: 2 FLOPs and 8 global bytes per thread x 1048576 threads",
        ),
        (
            "app.copy",
            // The host's NVRTC, where there is one, compiles CUDA C for its instruction mix.
            if wcetd::gpu::cuda::nvrtc::available() {
                "CUDA C compiled by NVRTC"
            } else {
                "its module is CUDA C and no NVRTC could be loaded here to compile it, so FLOPs unknown"
            },
        ),
    ] {
        let curve = b_on.get_curve(k).await.unwrap();
        assert_eq!(curve, b_off.get_curve(k).await.unwrap(), "{k}");
        let mut predicted = Vec::new();
        for &(sms, _) in &curve {
            let i_on = b_on.get_bound_info(k, sms).await.unwrap();
            let i_off = b_off.get_bound_info(k, sms).await.unwrap();
            assert_eq!(bound_part(&i_on), bound_part(&i_off), "{k} at {sms}");
            let label = text_of(&i_on, "prediction");
            assert!(
                label.contains("never a bound") && label.contains(from) && label.contains(dir),
                "{k}: {label}"
            );
            predicted.push(u64_of(&i_on, "predicted_typical_ns"));
            assert_eq!(u64_of(&i_off, "predicted_typical_ns"), 0);
            assert!(text_of(&i_off, "prediction").starts_with("none: prediction is off"));
        }
        // More SMs never predicted slower, and the smallest partition's time above zero.
        assert!(predicted[0] > 0, "{k}: {predicted:?}");
        assert!(
            predicted.windows(2).all(|w| w[1] <= w[0]),
            "{k}: {predicted:?}"
        );
    }
    // A manifest dropped in later is predicted once the reload has loaded it.
    write_manifest(kdir.path(), "app.later", "axpy.ptx", "axpy");
    let (ok, out, err) = wcetctl(on.bus.address(), &["kernels", "reload"]);
    assert!(ok, "{out}{err}");
    let jobs = on.calibration().await.list_jobs().await.unwrap();
    let job = jobs
        .iter()
        .map(|j| j.0)
        .max()
        .expect("the reload queued a job");
    assert_eq!(on.wait_job(job).await.0, "done");
    let info = b_on.get_bound_info("app.later", 8).await.unwrap();
    assert!(u64_of(&info, "predicted_typical_ns") > 0, "{info:?}");
    assert!(
        text_of(&info, "prediction").contains("app.later.toml"),
        "{info:?}"
    );
}

/// A prediction is wanted most before anything is measured: the daemon gives its predicted curve
/// for a kernel it has not calibrated (`GetPredictedCurve`, `wcetctl predict` without a device),
/// at every size it can realise, and refuses a name it does not know.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_predicts_a_kernel_before_it_is_calibrated() {
    let d = Daemon::start(&["--no-initial-calibration"]).await;
    let bounds = d.bounds().await;
    assert!(
        bounds.get_bound("srad", 64).await.is_err(),
        "not calibrated"
    );
    let (points, label) = bounds.get_predicted_curve("srad").await.unwrap();
    let sizes = bounds.partition_sizes().await.unwrap();
    assert_eq!(points.iter().map(|p| p.0).collect::<Vec<_>>(), sizes);
    assert!(points.iter().all(|p| p.1 > 0), "{points:?}");
    assert!(label.contains("never a bound"), "{label}");
    let e = bounds.get_predicted_curve("nope").await.unwrap_err();
    assert!(e.to_string().contains("accepted: backprop"), "{e}");
    let (ok, out, err) = wcetctl(d.bus.address(), &["predict", "srad", "--sizes", "8,132"]);
    assert!(ok, "{err}");
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.trim_start().starts_with(char::is_numeric))
        .collect();
    assert_eq!(rows.len(), 2, "{out}");
    assert!(out.contains("never a bound"), "{out}");
    let (ok, _, err) = wcetctl(d.bus.address(), &["predict", "srad", "--sizes", "7"]);
    assert!(!ok && err.contains("accepted: 8, "), "{err}");
}

fn offline(args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wcetctl"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .output()
        .expect("running wcetctl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn project_prints_the_design_format_for_every_config_row() {
    let (ok, out, err) = offline(&[
        "project",
        "--source",
        "calibration/gpu-perf/runs_4070.csv",
        "--target",
        "calibration/devices/titanx.toml",
        "--configs",
        "calibration/gpu-perf/runs_titanx.csv",
    ]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "kernel,N,rows,cols,predicted_ms");
    assert_eq!(lines.len(), 61, "one line per row of runs_titanx.csv");
    assert!(lines[1..].iter().all(|l| {
        let f: Vec<&str> = l.split(',').collect();
        f.len() == 5 && f[4].parse::<f64>().is_ok_and(|ms| ms > 0.0)
    }));
    // Without --configs, the source's own rows.
    let (ok, out, _) = offline(&[
        "project",
        "--source",
        "calibration/gpu-perf/runs_4070.csv",
        "--target",
        "titanx",
    ]);
    assert!(ok && out.lines().count() == 61);
}

/// `project --json` labels every row as a prediction, as `predict` does: never `measured`, which
/// in `GetBoundInfo` names a measured bound.
#[test]
fn project_json_labels_every_row_a_prediction() {
    let (ok, out, err) = offline(&[
        "--json",
        "project",
        "--source",
        "calibration/gpu-perf/runs_4070.csv",
        "--target",
        "titanx",
    ]);
    assert!(ok, "{err}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(rows.len(), 60);
    for r in &rows {
        assert_eq!(r["basis"], "runs", "{r}");
        let label = r["prediction"].as_str().unwrap_or_default();
        assert!(
            label.starts_with("a prediction of the typical time, never a bound: on ")
                && label.contains("runs_4070.csv"),
            "{r}"
        );
    }
    // A kernel without runs there: predicted from its static counts, and labelled so.
    let dir = tempfile::tempdir().unwrap();
    let configs = dir.path().join("c.csv");
    std::fs::write(
        &configs,
        "kernel,N,rows,cols,block,grid_blocks,FLOPs,BYTES,working_set_bytes\nnew,0,64,64,256,16,0,32768,32768\n",
    )
    .unwrap();
    let (ok, out, err) = offline(&[
        "--json",
        "project",
        "--source",
        "calibration/gpu-perf/runs_4070.csv",
        "--target",
        "titanx",
        "--configs",
        configs.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(rows[0]["basis"], "static", "{out}");
    let label = rows[0]["prediction"].as_str().unwrap_or_default();
    assert!(
        label.contains("never a bound") && label.contains("static counts"),
        "{out}"
    );
}

#[test]
fn bad_input_says_what_is_wrong_and_what_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("d.toml");
    std::fs::write(&toml, "name = \"x\"\nsms = 4\n").unwrap();
    let (ok, _, err) = offline(&[
        "project",
        "--source",
        "calibration/gpu-perf/runs_4070.csv",
        "--target",
        toml.to_str().unwrap(),
    ]);
    assert!(
        !ok && err.contains("missing field") && err.contains("accepted keys"),
        "{err}"
    );
    let (ok, _, err) = offline(&[
        "project",
        "--source",
        "calibration/devices/titanx.toml",
        "--target",
        "titanx",
    ]);
    assert!(
        !ok && err.contains("accepted") && err.contains("mean_ms"),
        "{err}"
    );
    let (ok, _, err) = offline(&["predict", "srad", "--device", "h100"]);
    assert!(
        !ok && err.contains("accepted: a committed description (rtx4070, titanx, h200, embedded)")
            && err.matches("os error").count() == 1,
        "{err}"
    );
    let (ok, _, err) = offline(&["predict", "srad", "--device", "titanx", "--sizes", "25"]);
    assert!(!ok && err.contains("accepted: at most 24"), "{err}");
    let (ok, _, err) = offline(&["predict", "nope", "--device", "h200"]);
    assert!(!ok && err.contains("accepted: needle"), "{err}");
    // A rate no GPU has: refused, naming the field, the value and the range (1e-300 GB/s
    // once printed 18446744073709551615 ns at every size).
    let titanx = std::fs::read_to_string(format!(
        "{}/calibration/devices/titanx.toml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let absurd: String = titanx
        .lines()
        .map(|l| {
            if l.starts_with("mem_bandwidth_gbps") {
                "mem_bandwidth_gbps = 1e-300"
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let toml = dir.path().join("absurd.toml");
    std::fs::write(&toml, absurd).unwrap();
    let (ok, out, err) = offline(&["predict", "srad", "--device", toml.to_str().unwrap()]);
    assert!(
        !ok && err.contains("`mem_bandwidth_gbps` is 1e-300; accepted: 1 to 100000 GB/s"),
        "{out}{err}"
    );
}

#[test]
fn predict_prints_a_curve_for_a_device_the_daemon_does_not_have() {
    let (ok, out, err) = offline(&["predict", "srad", "--device", "titanx"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("never a bound") && out.contains("NVIDIA GeForce GTX TITAN X"),
        "{out}"
    );
    // Every TPC of the 24-SM TITAN X, ascending, each with a positive time.
    let times: Vec<(u32, u64)> = out
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
        .collect();
    assert_eq!(
        times.iter().map(|t| t.0).collect::<Vec<_>>(),
        (1..=12).map(|i| 2 * i).collect::<Vec<_>>()
    );
    assert!(times.windows(2).all(|w| w[1].1 <= w[0].1), "{times:?}");
    // A kernel of one's own, from its manifest: named as the manifest names it.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("axpy.ptx"), AXPY_PTX).unwrap();
    write_manifest(dir.path(), "app.axpy", "axpy.ptx", "axpy");
    let manifest = dir.path().join("app.axpy.toml");
    let (ok, out, err) = offline(&["predict", manifest.to_str().unwrap(), "--device", "rtx4070"]);
    assert!(ok, "{err}");
    assert!(
        out.starts_with("app.axpy on NVIDIA GeForce RTX 4070") && out.contains("PTX of `axpy`"),
        "{out}"
    );
}
