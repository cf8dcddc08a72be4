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
    let (ok, _, err) = offline(&["predict", "nope", "--device", "h200"]);
    assert!(!ok && err.contains("accepted: needle"), "{err}");
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
}
