//! `org.wcetd.Admission1` end to end: the real daemon on the simulated H200 over a private bus,
//! checked against the bounds `Bounds1` serves; clock scaling; interference tags; `admit_file`.

mod admission_support;

use admission_support::{calibrated, write, Daemon, Env};
use wcetd::admission_bus::admit_file;

const ADMISSION: &str = "org.wcetd.Admission1";
type Task<'a> = (&'a str, Vec<&'a str>, u32, u64, u64);
type Verdict = (bool, Vec<(String, u64, u64, i64)>);

async fn check(d: &Daemon, method: &str, tasks: &[Task<'_>]) -> Result<Verdict, (String, String)> {
    d.call(ADMISSION, method, &(tasks.to_vec(),)).await
}

#[tokio::test]
async fn check_sums_served_bounds_and_enforces_deadlines_and_capacity() {
    let env = Env::new();
    let d = calibrated(&env, &[]).await;
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
    let d = calibrated(&env, &[]).await;
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
    let d = calibrated(&env, &[]).await;
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
    let d = calibrated(&env, &[]).await;
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
    let nominal = calibrated(&env, &[]).await;
    let info = nominal.bound_info("needle", 64).await;
    assert!(!bool::try_from(&info["clock_scaled"]).unwrap());
    let base = nominal.bound("needle", 64).await;
    drop(nominal);
    // Same state: the calibration is loaded, not redone; only the clock reading is lower.
    let slow = env.daemon(&["--sim-clock-mhz", "990"]).await;
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
}

#[tokio::test]
async fn admission_uses_the_contended_bound_when_it_is_higher() {
    let env = Env::new();
    drop(calibrated(&env, &[]).await);
    // One daemon calibrates one tag; a second run on the same state adds the contended one.
    let d = env.daemon(&["--contended"]).await;
    let job: u64 = d
        .call(
            "org.wcetd.Calibration1",
            "Recalibrate",
            &(vec!["backprop"],),
        )
        .await
        .unwrap();
    d.wait_job(job).await;
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
}

#[tokio::test]
async fn admit_file_renders_the_verdict_of_a_task_set_file() {
    let env = Env::new();
    let d = calibrated(&env, &[]).await;
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("calibration/tasksets/example.toml");
    let table = admit_file(&d.conn, &example, false).await.unwrap();
    assert!(
        table.contains("ADMITTED") && table.contains("perception") && table.contains("128 of 132"),
        "{table}"
    );
    let shared = admit_file(&d.conn, &example, true)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        shared.contains("InvalidArgs") && shared.contains("sms"),
        "{shared}"
    );
    let bad = write(
        env.dir.path(),
        "bad.toml",
        "[[task]]\nname = \"x\"\nkernels = [\"nope\"]\nsms = 8\nperiod_ns = 10\ndeadline_ns = 10\n",
    );
    let e = admit_file(&d.conn, &bad, false)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("UnknownKernel") && e.contains("`x`"), "{e}");
}
