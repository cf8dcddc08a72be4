//! `org.wcetd.Admission1` end to end: the real daemon on the simulated H200 over a private bus,
//! checked against the bounds `Bounds1` serves; clock scaling; interference tags; failing closed
//! on isolated, stale and weaker bounds; `wcetctl admit` and `suggest` and their exit statuses.

mod admission_support;

use std::collections::HashMap;

use admission_support::{calibrated, write, Daemon, Env};
use wcetd::admission_bus::Detailed;
use zbus::Variant;

const ADMISSION: &str = "org.wcetd.Admission1";
type Task<'a> = (&'a str, Vec<&'a str>, u32, u64, u64);
type Verdict = (bool, Vec<(String, u64, u64, i64)>);

/// The arithmetic tests take every bound as stated: a heavy-tailed kernel's bound (stated at
/// 1e-4) is then not refused, so they test sums and deadlines, not the exceedance policy.
const ANY_EXCEEDANCE: [&str; 2] = ["--exceedance", "1e-4"];

async fn check(d: &Daemon, method: &str, tasks: &[Task<'_>]) -> Result<Verdict, (String, String)> {
    d.call(ADMISSION, method, &(tasks.to_vec(),)).await
}

async fn detailed(
    d: &Daemon,
    tasks: &[Task<'_>],
    options: &[(&str, Variant<'_>)],
) -> Result<Detailed, (String, String)> {
    let options: HashMap<&str, &Variant<'_>> = options.iter().map(|(k, v)| (*k, v)).collect();
    d.call(ADMISSION, "CheckDetailed", &(tasks.to_vec(), options))
        .await
}

#[tokio::test]
async fn check_sums_served_bounds_and_enforces_deadlines_and_capacity() {
    let env = Env::new();
    let d = calibrated(&env, &ANY_EXCEEDANCE).await;
    let response = d.bound("needle", 64).await + d.bound("bfs", 64).await;
    let ok = check(
        &d,
        "Check",
        &[("cam", vec!["needle", "bfs"], 70, 1_000_000_000, response)],
    )
    .await
    .unwrap();
    assert_eq!(ok, (true, vec![("cam".to_string(), response, 64, 0)]));
    let late = check(
        &d,
        "Check",
        &[(
            "cam",
            vec!["needle", "bfs"],
            64,
            1_000_000_000,
            response - 1,
        )],
    )
    .await
    .unwrap();
    assert!(!late.0);
    assert_eq!(late.1[0].3, -1);
    let crowded = [
        ("a", vec!["needle"], 128, 1_000_000_000, 1_000_000_000),
        ("b", vec!["needle"], 8, 1_000_000_000, 1_000_000_000),
    ];
    let v = check(&d, "Check", &crowded).await.unwrap();
    assert!(
        v.1.iter().all(|t| t.3 >= 0) && !v.0,
        "136 of 132 SMs must be rejected: {v:?}"
    );
}

#[tokio::test]
async fn check_shared_adds_blocking_and_interference() {
    let env = Env::new();
    let d = calibrated(&env, &ANY_EXCEEDANCE).await;
    let (n, b) = (d.bound("needle", 32).await, d.bound("bfs", 32).await);
    let tasks = [
        ("hi", vec!["needle"], 32, 1_000_000_000, 1_000_000_000),
        ("lo", vec!["bfs"], 32, 1_000_000_000, 1_000_000_000),
    ];
    let (admitted, per_task) = check(&d, "CheckShared", &tasks).await.unwrap();
    assert!(admitted);
    // hi may find lo's kernel just started (blocking); lo waits for hi's job released with it.
    assert_eq!((per_task[0].1, per_task[1].1), (n + b, n + b));
    let tight = [
        ("hi", vec!["needle"], 32, 1_000_000_000, n + b - 1),
        tasks[1].clone(),
    ];
    let (admitted, per_task) = check(&d, "CheckShared", &tight).await.unwrap();
    assert!(!admitted, "blocking by lo's kernel must make hi miss");
    assert_eq!(per_task[0].3, -1);
}

#[tokio::test]
async fn suggest_agrees_with_min_partition_and_reports_infeasibility() {
    let env = Env::new();
    let d = calibrated(&env, &ANY_EXCEEDANCE).await;
    let deadline = d.bound("backprop", 80).await;
    let m: u32 = d
        .call("org.wcetd.Bounds1", "MinPartition", &("backprop", deadline))
        .await
        .unwrap();
    let one = vec![("bp", vec!["backprop"], 1_000_000_000u64, deadline)];
    let got: Vec<(String, u32)> = d.call(ADMISSION, "Suggest", &(one,)).await.unwrap();
    assert_eq!(got, vec![("bp".to_string(), m)]);
    let names: Vec<String> = (0..=132 / m).map(|i| format!("bp{i}")).collect();
    let many: Vec<_> = names
        .iter()
        .map(|n| (n.as_str(), vec!["backprop"], 1_000_000_000u64, deadline))
        .collect();
    let (name, message) = d
        .call::<_, Vec<(String, u32)>>(ADMISSION, "Suggest", &(many,))
        .await
        .unwrap_err();
    assert_eq!(name, "org.wcetd.Error.Infeasible");
    assert!(message.contains("132"), "{message}");
    let hopeless = vec![("fast", vec!["needle"], 1_000u64, 1u64)];
    let (name, message) = d
        .call::<_, Vec<(String, u32)>>(ADMISSION, "Suggest", &(hopeless,))
        .await
        .unwrap_err();
    assert_eq!(name, "org.wcetd.Error.Infeasible");
    assert!(message.contains("`fast`"), "{message}");
}

#[tokio::test]
async fn bad_task_sets_are_refused_with_the_task_and_field() {
    let env = Env::new();
    let d = calibrated(&env, &ANY_EXCEEDANCE).await;
    let t = |name, kernels: Vec<&'static str>, sms, period, deadline| {
        (name, kernels, sms, period, deadline)
    };
    let cases: Vec<(&str, Vec<Task>, &str, &str)> = vec![
        (
            "Check",
            vec![],
            "org.freedesktop.DBus.Error.InvalidArgs",
            "empty",
        ),
        (
            "Check",
            vec![t("p", vec!["needle"], 64, 0, 1)],
            "org.freedesktop.DBus.Error.InvalidArgs",
            "period_ns",
        ),
        (
            "Check",
            vec![t("d", vec!["needle"], 64, 10, 11)],
            "org.freedesktop.DBus.Error.InvalidArgs",
            "deadline_ns",
        ),
        (
            "Check",
            vec![t("z", vec!["needle"], 64, 10, 0)],
            "org.freedesktop.DBus.Error.InvalidArgs",
            "deadline_ns",
        ),
        (
            "Check",
            vec![t("e", vec![], 64, 10, 10)],
            "org.freedesktop.DBus.Error.InvalidArgs",
            "kernels",
        ),
        (
            "Check",
            vec![
                t("n", vec!["needle"], 8, 10, 10),
                t("n", vec!["bfs"], 8, 10, 10),
            ],
            "org.freedesktop.DBus.Error.InvalidArgs",
            "name",
        ),
        (
            "Check",
            vec![t("u", vec!["needle", "nope"], 64, 10, 10)],
            "org.wcetd.Error.UnknownKernel",
            "kernels[1]",
        ),
        (
            "Check",
            vec![t("big", vec!["needle"], 200, 10, 10)],
            "org.wcetd.Error.InvalidPartition",
            "sms",
        ),
        (
            "Check",
            vec![t("small", vec!["needle"], 4, 10, 10)],
            "org.wcetd.Error.InvalidPartition",
            "sms",
        ),
        (
            "CheckShared",
            vec![
                t("a", vec!["needle"], 8, 10, 10),
                t("b", vec!["needle"], 16, 10, 10),
            ],
            "org.freedesktop.DBus.Error.InvalidArgs",
            "sms",
        ),
    ];
    for (method, tasks, want, field) in cases {
        let (name, message) = check(&d, method, &tasks).await.unwrap_err();
        assert_eq!(name, want, "{method} {tasks:?}: {message}");
        assert!(
            message.contains(field),
            "{method} {tasks:?}: {message} should name {field}"
        );
        if let Some(task) = tasks.last() {
            assert!(
                message.contains(&format!("`{}`", task.0)),
                "{message} should name task {}",
                task.0
            );
        }
    }
}

#[tokio::test]
async fn bounds_stretch_when_the_clock_drops_and_admission_follows() {
    let env = Env::new();
    let nominal = calibrated(&env, &ANY_EXCEEDANCE).await;
    let info = nominal.bound_info("needle", 64).await;
    assert!(!bool::try_from(&info["clock_scaled"]).unwrap());
    let base = nominal.bound("needle", 64).await;
    drop(nominal);
    // Same state: the calibration is loaded, not redone; only the clock reading is lower.
    let slow = env
        .daemon(&["--sim-clock-mhz", "990", "--exceedance", "1e-4"])
        .await;
    let info = slow.bound_info("needle", 64).await;
    assert!(bool::try_from(&info["clock_scaled"]).unwrap());
    assert_eq!(u32::try_from(&info["calibrated_clock_mhz"]).unwrap(), 1980);
    assert_eq!(u32::try_from(&info["current_clock_mhz"]).unwrap(), 990);
    assert_eq!(u64::try_from(&info["bound_ns"]).unwrap(), 2 * base);
    let v = check(
        &slow,
        "Check",
        &[("t", vec!["needle"], 64, 1_000_000_000, base)],
    )
    .await
    .unwrap();
    assert_eq!(
        v,
        (false, vec![("t".to_string(), 2 * base, 64, -(base as i64))])
    );
    drop(slow);
    // A clock that cannot be read scales nothing, and the verdict says so.
    let unread = env
        .daemon(&["--sim-clock-mhz", "0", "--exceedance", "1e-4"])
        .await;
    let set: Vec<Task> = vec![("t", vec!["needle"], 64, 1_000_000_000, 1_000_000_000)];
    let answer = detailed(&unread, &set, &[]).await.unwrap();
    assert!(answer.admitted, "{answer:?}");
    assert_eq!(answer.tasks[0].response_ns, base);
    assert!(
        answer
            .accepted
            .iter()
            .any(|a| a.contains("could not be read")),
        "{answer:?}"
    );
}

#[tokio::test]
async fn admission_uses_the_contended_bound_when_it_is_higher() {
    let env = Env::new();
    // Both tags are calibrated by default.
    let d = calibrated(&env, &ANY_EXCEEDANCE).await;
    let d = &d;
    let tagged = |tag: &'static str, sms: u32| async move {
        d.call::<_, u64>(
            "org.wcetd.Bounds1",
            "GetBoundTagged",
            &("backprop", sms, tag),
        )
        .await
        .unwrap()
    };
    // At 16 SMs the stressor holds 88% of the device: the slowdown dwarfs the noise.
    let (isolated, contended) = (tagged("isolated", 16).await, tagged("contended", 16).await);
    assert!(
        contended > isolated,
        "a memory-bound kernel next to a stressor: {contended} <= {isolated}"
    );
    for sms in [16u32, 64, 128] {
        let safer = tagged("isolated", sms)
            .await
            .max(tagged("contended", sms).await);
        let v = check(
            d,
            "Check",
            &[("bp", vec!["backprop"], sms, 1_000_000_000, 1_000_000_000)],
        )
        .await
        .unwrap();
        assert_eq!(v.1[0].1, safer, "Check at {sms} SMs must use the safer tag");
    }
    let info = d.bound_info("backprop", 16).await;
    assert_eq!(
        <Vec<String>>::try_from(info["interference_available"].try_clone().unwrap()).unwrap(),
        ["isolated", "contended"]
    );
    assert_eq!(
        <&str>::try_from(&info["interference"]).unwrap(),
        "contended"
    );
    assert_eq!(u32::try_from(&info["stressor_sms"]).unwrap(), 132 - 16);
}

/// The scheduler: two partitions that run at once, on isolated bounds alone. Not
/// admitted, and the answer says how to get contended bounds; doing what it says admits the set.
#[tokio::test]
async fn co_running_partitions_on_isolated_bounds_alone_are_not_admitted() {
    let env = Env::new();
    let d = calibrated(
        &env,
        &["--interference", "isolated", "--exceedance", "1e-4"],
    )
    .await;
    let info = d.bound_info("bfs", 32).await;
    assert_eq!(<&str>::try_from(&info["interference"]).unwrap(), "isolated");
    let set: Vec<Task> = vec![
        ("detect", vec!["needle"], 64, 1_000_000_000, 1_000_000_000),
        ("plan", vec!["bfs"], 32, 1_000_000_000, 1_000_000_000),
    ];
    let (name, message) = check(&d, "Check", &set).await.unwrap_err();
    assert_eq!(name, "org.wcetd.Error.NotCalibrated", "{message}");
    for what in [
        "`detect`",
        "`plan`",
        "no contended bound",
        "wcetctl recalibrate --interference contended bfs",
        "RecalibrateWith",
    ] {
        assert!(message.contains(what), "{message} should say {what}");
    }
    let answer = detailed(&d, &set, &[]).await.unwrap();
    assert!(!answer.admitted, "{answer:?}");
    assert!(answer
        .tasks
        .iter()
        .all(|t| t.slack_ns >= 0 && t.interference == "isolated"));
    assert!(answer
        .reasons
        .iter()
        .any(|r| r.contains("wcetctl recalibrate --interference contended needle")));
    // One task alone has no co-runner: isolated bounds hold.
    let alone = detailed(&d, &set[..1], &[]).await.unwrap();
    assert!(alone.admitted, "{alone:?}");
    // A launch time production saw under contention holds the bound up before any contended
    // calibration exists, as GetBound serves it (admission once rested on the isolated bound
    // alone, four times below it here).
    let seen = (4 * alone.tasks[0].response_ns).to_string();
    let (code, out, err) = admission_support::wcetctl(
        env.address(),
        &[
            "report",
            "--interference",
            "contended",
            "needle",
            "64",
            &seen,
        ],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let after = detailed(&d, &set[..1], &[]).await.unwrap();
    assert_eq!(after.tasks[0].response_ns.to_string(), seen, "{after:?}");
    // The verdict says what it rests on: that reported time, not a calibration's bound.
    let rests_on = after.bounds.as_deref().unwrap();
    assert_eq!(rests_on.len(), 1, "{after:?}");
    assert_eq!(
        (rests_on[0].kernel.as_str(), rests_on[0].partition_sms),
        ("needle", 64)
    );
    assert_eq!(rests_on[0].bound_ns.to_string(), seen);
    assert_eq!(rests_on[0].basis, "observed", "{after:?}");
    // Do as the answer says, with wcetctl.
    let (code, out, err) = admission_support::wcetctl(
        env.address(),
        &[
            "recalibrate",
            "--interference",
            "contended",
            "needle",
            "bfs",
        ],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let answer = detailed(&d, &set, &[]).await.unwrap();
    assert!(answer.admitted, "{answer:?}");
    assert!(answer.tasks.iter().all(|t| t.interference == "contended"));
    // One launch per job, each on its own partition: per job as per launch.
    assert!(
        answer
            .tasks
            .iter()
            .all(|t| t.job_exceedance == Some(t.exceedance)),
        "{answer:?}"
    );
    // Each bound it rests on is one GetBoundInfo serves (of its tag, or untagged), with that
    // answer's calibration and basis.
    let rests_on = answer.bounds.as_deref().unwrap();
    assert_eq!(rests_on.len(), 2, "{answer:?}");
    for b in rests_on {
        let tagged: HashMap<String, zbus::OwnedVariant> = d
            .call(
                "org.wcetd.Bounds1",
                "GetBoundInfoTagged",
                &(&b.kernel, b.partition_sms, &b.interference),
            )
            .await
            .unwrap();
        let untagged = d.bound_info(&b.kernel, b.partition_sms).await;
        let says = |info: &HashMap<String, zbus::OwnedVariant>| {
            let text = |k: &str| String::try_from(info[k].clone()).unwrap();
            u64::try_from(&info["bound_ns"]).unwrap() == b.bound_ns
                && text("calibration") == b.calibration
                && text("basis") == b.basis
                && text("interference") == b.interference
        };
        assert!(says(&tagged) || says(&untagged), "{b:?}");
    }
}

/// A calibration made under another clock policy is stale: Health says so, and admission refuses
/// it unless told to accept it, and then says it did.
#[tokio::test]
async fn a_stale_calibration_shows_in_health_and_in_admission() {
    let env = Env::new();
    drop(calibrated(&env, &ANY_EXCEEDANCE).await);
    let profile = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("calibration/profiles/h200.toml"),
    )
    .unwrap()
    .replace("sm_clock_mhz = 1980", "sm_clock_mhz = 2100");
    let profile = write(env.dir.path(), "h200-2100.toml", &profile);
    let d = env
        .daemon(&[
            "--sim-profile",
            profile.to_str().unwrap(),
            "--no-initial-calibration",
            "--exceedance",
            "1e-4",
        ])
        .await;
    let health: String = d
        .call(
            "org.freedesktop.DBus.Properties",
            "Get",
            &("org.wcetd.Bounds1", "Health"),
        )
        .await
        .map(|v: zbus::OwnedVariant| String::try_from(v).unwrap())
        .unwrap();
    assert!(
        health.starts_with("degraded") && health.contains("stale") && health.contains("needle"),
        "{health}"
    );
    assert!(bool::try_from(&d.bound_info("needle", 64).await["stale"]).unwrap());
    let set: Vec<Task> = vec![("t", vec!["needle"], 64, 1_000_000_000, 1_000_000_000)];
    let (name, message) = check(&d, "Check", &set).await.unwrap_err();
    assert_eq!(name, "org.wcetd.Error.NotCalibrated");
    assert!(
        message.contains("stale") && message.contains("wcetctl recalibrate needle"),
        "{message}"
    );
    let refused = detailed(&d, &set, &[]).await.unwrap();
    assert!(!refused.admitted && refused.tasks[0].stale, "{refused:?}");
    let accepted = detailed(&d, &set, &[("accept_stale", true.into())])
        .await
        .unwrap();
    assert!(accepted.admitted, "{accepted:?}");
    assert!(
        accepted.accepted.iter().any(|a| a.contains("stale")),
        "{accepted:?}"
    );
    drop(d);
    // Another GPU model's calibration, served stale, is no evidence about this one: refused
    // even when stale bounds are accepted.
    let other = std::fs::read_to_string(&profile).unwrap().replace(
        "name = \"Simulated NVIDIA H200",
        "name = \"Simulated other GPU",
    );
    let other = write(env.dir.path(), "other.toml", &other);
    let d = env
        .daemon(&[
            "--sim-profile",
            other.to_str().unwrap(),
            "--no-initial-calibration",
            "--exceedance",
            "1e-4",
        ])
        .await;
    let refused = detailed(&d, &set, &[("accept_stale", true.into())])
        .await
        .unwrap();
    assert!(!refused.admitted, "{refused:?}");
    assert!(
        refused
            .reasons
            .iter()
            .any(|r| r.contains("another GPU model") && r.contains("wcetctl recalibrate needle")),
        "{refused:?}"
    );
}

/// A kernel never calibrated, in a set of tasks that run at once: the refusal advises measuring
/// it as the daemon calibrates (both interferences), not the isolated bound alone, after which
/// the set was refused again for want of the contended one (a hunt).
#[tokio::test]
async fn a_never_calibrated_kernel_is_advised_a_full_calibration() {
    let env = Env::new();
    let d = env.daemon(&["--no-initial-calibration"]).await;
    let set: Vec<Task> = vec![
        ("detect", vec!["needle"], 64, 1_000_000_000, 1_000_000_000),
        ("plan", vec!["bfs"], 32, 1_000_000_000, 1_000_000_000),
    ];
    let (name, message) = check(&d, "Check", &set).await.unwrap_err();
    assert_eq!(name, "org.wcetd.Error.NotCalibrated", "{message}");
    assert!(
        message.contains("wcetctl recalibrate needle") && !message.contains("--interference"),
        "{message}"
    );
}

/// `exceedance` is served per bound; a daemon configured stricter than its bounds refuses them
/// unless the caller accepts the weaker exceedance, and says so.
#[tokio::test]
async fn exceedance_is_served_and_weaker_bounds_are_admitted_only_on_request() {
    let env = Env::new();
    drop(calibrated(&env, &[]).await);
    // The same calibration (not stale, so not redone), served by a daemon configured at 1e-12.
    let d = env.daemon(&["--exceedance", "1e-12"]).await;
    let info = d.bound_info("needle", 64).await;
    let exceedance = f64::try_from(&info["exceedance"]).unwrap();
    // Made at 1e-9; the device's throttling, allowed for, can state it a little stricter.
    assert!((0.99e-9..=1e-9).contains(&exceedance), "{exceedance}");
    assert_eq!(
        f64::try_from(&info["configured_exceedance"]).unwrap(),
        1e-12
    );
    assert_eq!(
        <&str>::try_from(&info["exceedance_basis"]).unwrap(),
        "tail-model"
    );
    assert!(<&str>::try_from(&info["notes"])
        .unwrap()
        .contains("weaker than the configured"));
    let set: Vec<Task> = vec![("t", vec!["needle"], 64, 1_000_000_000, 1_000_000_000)];
    let (name, message) = check(&d, "Check", &set).await.unwrap_err();
    assert_eq!(name, "org.wcetd.Error.NotCalibrated");
    assert!(message.contains("accept_exceedance"), "{message}");
    let answer = detailed(&d, &set, &[("accept_exceedance", 1e-3.into())])
        .await
        .unwrap();
    assert!(answer.admitted, "{answer:?}");
    assert_eq!(answer.tasks[0].exceedance, exceedance);
    assert!(
        answer.accepted[0].contains("accept_exceedance"),
        "{answer:?}"
    );
    let (name, message) = detailed(&d, &set, &[("accept_exceedance", 2.0.into())])
        .await
        .unwrap_err();
    assert_eq!(name, "org.freedesktop.DBus.Error.InvalidArgs", "{message}");
    let (name, message) = detailed(&d, &set, &[("nope", true.into())])
        .await
        .unwrap_err();
    assert_eq!(name, "org.freedesktop.DBus.Error.InvalidArgs");
    assert!(message.contains("accept_stale"), "{message}");
}

/// `wcetctl admit`: 0 admitted, 1 not admitted (with the reason), 2 an error; `--json`;
/// `suggest` sizes a set and answers as admit does; a size above the device is InvalidPartition.
#[tokio::test]
async fn wcetctl_admit_and_suggest_exit_with_the_verdict() {
    let env = Env::new();
    let d = calibrated(&env, &ANY_EXCEEDANCE).await;
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("calibration/tasksets/example.toml");
    let example = example.to_str().unwrap();
    let run = |args: &[&str]| admission_support::wcetctl(env.address(), args);
    let (code, out, err) = run(&["admit", example]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("ADMITTED")
            && out.contains("perception")
            && out.contains("128 of 132")
            && out.contains("contended"),
        "{out}"
    );
    let (code, out, _) = run(&["--json", "admit", example]);
    assert_eq!(code, Some(0));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["admitted"], true);
    assert!(v["tasks"][0]["exceedance"].as_f64().unwrap() > 0.0);
    let late = d.bound("needle", 64).await - 1;
    let tight = write(
        env.dir.path(),
        "tight.toml",
        &format!("[[task]]\nname = \"x\"\nkernels = [\"needle\"]\nsms = 64\nperiod_ns = 1000000000\ndeadline_ns = {late}\n"),
    );
    let (code, out, _) = run(&["admit", tight.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("REJECTED") && out.contains("misses its deadline"),
        "{out}"
    );
    let (code, _, err) = run(&["admit", "--shared", example]);
    assert_eq!(code, Some(2));
    assert!(err.contains("InvalidArgs") && err.contains("sms"), "{err}");
    let bad = write(
        env.dir.path(),
        "bad.toml",
        "[[task]]\nname = \"x\"\nkernels = [\"nope\"]\nsms = 8\nperiod_ns = 10\ndeadline_ns = 10\n",
    );
    let (code, _, err) = run(&["admit", bad.to_str().unwrap()]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("UnknownKernel") && err.contains("`x`"),
        "{err}"
    );
    let (code, out, err) = run(&["suggest", example]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("suggested: perception on") && out.contains("ADMITTED"),
        "{out}"
    );
    // A set no size admits is the daemon's answer too (`Infeasible`): 1, as a verdict, not the
    // 2 of an error (which read as no daemon); with --json, an answer on standard output.
    let hopeless = write(
        env.dir.path(),
        "hopeless.toml",
        "[[task]]\nname = \"x\"\nkernels = [\"needle\"]\nsms = 64\nperiod_ns = 1000\ndeadline_ns = 100\n",
    );
    let hopeless = hopeless.to_str().unwrap();
    let (code, out, err) = run(&["suggest", hopeless]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("not admitted:") && out.contains("Infeasible"),
        "{out}"
    );
    let (code, out, _) = run(&["--json", "suggest", hopeless]);
    assert_eq!(code, Some(1), "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["admitted"], false);
    assert_eq!(v["error_name"], "org.wcetd.Error.Infeasible");
    let (code, _, err) = run(&["bound", "needle", "133"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("InvalidPartition") && err.contains("132"),
        "{err}"
    );
    let (name, _) = d
        .call::<_, u64>("org.wcetd.Bounds1", "GetBound", &("needle", 133u32))
        .await
        .unwrap_err();
    assert_eq!(name, "org.wcetd.Error.InvalidPartition");
}
