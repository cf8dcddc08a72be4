//! Several GPUs in one daemon, and calibration bundles between daemons, over private buses on the
//! simulated GPU: both devices' objects serve and the root answers for the default one; a job on
//! one device does not hold up queries on the other (measured side by side in one run); a bundle
//! exported by one daemon is accepted by another with the same fingerprint, checked on arrival,
//! and refused with what differs by one with another fingerprint; production reports judge and
//! raise only their own device's bounds, and one metrics file covers every device.

mod common;
mod prom_text;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{error_name, Daemon, WAIT};
use futures_util::StreamExt;
use wcetd::admission_bus::{Admission1Proxy, WireTask};
use wcetd::client::{BoundsProxy, CalibrationProxy};
use wcetd::monitor_bus::Monitor1Proxy;

async fn bounds_at(d: &Daemon, path: &str) -> BoundsProxy<'static> {
    BoundsProxy::builder(&d.conn)
        .path(path.to_string())
        .build()
        .await
        .unwrap()
}

async fn calibration_at(d: &Daemon, path: &str) -> CalibrationProxy<'static> {
    CalibrationProxy::builder(&d.conn)
        .path(path.to_string())
        .build()
        .await
        .unwrap()
}

/// Queue `kernels` on the object at `path` and wait for its JobFinished there.
async fn calibrate_at(d: &Daemon, path: &str, kernels: &[&str]) -> (String, String) {
    let cal = calibration_at(d, path).await;
    let job = cal.recalibrate(kernels).await.unwrap();
    tokio::time::timeout(WAIT, wcetd::client::wait_for_job(&cal, job, |_| {}))
        .await
        .expect("job finished in time")
        .unwrap()
}

/// Two simulated GPUs, nothing calibrated at start and no delay probe: jobs run only as asked.
const TWO_IDLE_GPUS: &[&str] = &[
    "--sim-devices",
    "2",
    "--no-initial-calibration",
    "--delay-probe-launches",
    "0",
];

/// A card of this host keeps its calibration to itself, served beside another or left out by
/// `--devices`: a card without one served it stale at start, raised by its production reports
/// (black-box runs found both, where api.md says GPUs never mix).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_of_this_host_keeps_its_calibration_to_itself() {
    let mut d = Daemon::start(&[TWO_IDLE_GPUS, &["--devices", "1"]].concat()).await;
    let gpu1 = wcetd::bus::device_path(1);
    assert_eq!(calibrate_at(&d, &gpu1, &["srad"]).await.0, "done");
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    for devices in [&["--devices", "0"][..], &[]] {
        d.child = common::spawn_wcetd(
            d.bus.address(),
            &d.state_dir(),
            &[TWO_IDLE_GPUS, devices].concat(),
        );
        d.wait_for_name().await;
        let gpu0 = bounds_at(&d, &wcetd::bus::device_path(0)).await;
        let refused = gpu0.get_bound("srad", 64).await.unwrap_err();
        assert_eq!(
            error_name(&refused),
            "org.wcetd.Error.NotCalibrated",
            "{devices:?}"
        );
        d.child.kill().unwrap();
        d.child.wait().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_devices_serve_and_the_root_answers_for_the_default() {
    let d = Daemon::start(&["--sim-devices", "2", "--no-initial-calibration"]).await;
    let root = d.bounds().await;
    let devices = root.devices().await.unwrap();
    assert_eq!(devices.len(), 2, "{devices:?}");
    assert_eq!(devices[1].1.as_str(), "/org/wcetd/Wcetd1/gpu/1");
    assert_ne!(devices[0].2, devices[1].2, "each device its own UUID");

    let (state, message) = calibrate_at(&d, "/org/wcetd/Wcetd1/gpu/1", &["srad"]).await;
    assert_eq!(state, "done", "{message}");
    let gpu1 = bounds_at(&d, "/org/wcetd/Wcetd1/gpu/1").await;
    let gpu0 = bounds_at(&d, "/org/wcetd/Wcetd1/gpu/0").await;
    assert!(gpu1.get_bound("srad", 64).await.unwrap() > 0);
    // Device 0 has its own calibrations: none yet, and the root answers for it.
    let err = gpu0.get_bound("srad", 64).await.unwrap_err();
    assert_eq!(error_name(&err), "org.wcetd.Error.NotCalibrated");
    let err = root.get_bound("srad", 64).await.unwrap_err();
    assert_eq!(error_name(&err), "org.wcetd.Error.NotCalibrated");
    assert_eq!(
        gpu1.devices().await.unwrap(),
        devices,
        "every object lists every device"
    );
}

/// A command a GPU's message advises acts on that GPU when run exactly as printed. Found by a
/// black-box review: GPU 1 refused a co-running set for want of contended bounds and advised a
/// plain `wcetctl recalibrate ...`, which recalibrated the default GPU; GPU 1 went on refusing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpus_advice_run_as_printed_acts_on_that_gpu() {
    let d = Daemon::start(&[TWO_IDLE_GPUS, &["--interference", "isolated"]].concat()).await;
    let gpu1 = "/org/wcetd/Wcetd1/gpu/1";
    let (state, message) = calibrate_at(&d, gpu1, &["srad"]).await;
    assert_eq!(state, "done", "{message}");
    let uncalibrated = bounds_at(&d, gpu1).await.get_bound("bfs", 64).await;
    let said = uncalibrated.unwrap_err().to_string();
    assert!(said.contains("`wcetctl --gpu 1 recalibrate bfs`"), "{said}");

    let admission = Admission1Proxy::builder(&d.conn)
        .path(gpu1)
        .build()
        .await
        .unwrap();
    let set: Vec<WireTask> = ["detect", "plan"]
        .map(|t| {
            (
                t.into(),
                vec!["srad".into()],
                64,
                1_000_000_000,
                1_000_000_000,
            )
        })
        .into();
    let refused = admission.check(&set).await.unwrap_err().to_string();
    let advised = refused
        .split('`')
        .find(|s| s.starts_with("wcetctl "))
        .unwrap_or_else(|| panic!("no command in {refused}"));
    assert!(
        advised.starts_with("wcetctl --gpu 1 recalibrate --interference contended"),
        "{refused}"
    );
    let (ok, out, err) = common::wcetctl(
        d.bus.address(),
        &advised.split(' ').collect::<Vec<_>>()[1..],
    );
    assert!(ok, "`{advised}`: {out}{err}");
    // Analysed now, on the contended bounds the command measured; GPU 0 was left alone.
    admission.check(&set).await.unwrap();
    let gpu0 = bounds_at(&d, "/org/wcetd/Wcetd1/gpu/0").await;
    let err = gpu0.get_bound("srad", 64).await.unwrap_err();
    assert_eq!(error_name(&err), "org.wcetd.Error.NotCalibrated");

    // wcetctl's own hints name the GPU too: job numbers are per GPU, and a bare `wcetctl cancel
    // N` printed on GPU 1 cancelled GPU 0's job N (a hunt found it).
    let (ok, out, err) = common::wcetctl(
        d.bus.address(),
        &["--gpu", "1", "recalibrate", "--no-wait", "bfs"],
    );
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("follow it with `wcetctl --gpu 1 jobs`")
            && out.contains("stop it with `wcetctl --gpu 1 cancel "),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_on_one_device_does_not_delay_queries_on_the_other() {
    let d = Daemon::start(TWO_IDLE_GPUS).await;
    let (state, message) = calibrate_at(&d, "/org/wcetd/Wcetd1/gpu/1", &["srad"]).await;
    assert_eq!(state, "done", "{message}");
    let gpu1 = bounds_at(&d, "/org/wcetd/Wcetd1/gpu/1").await;
    let p50 = |mut v: Vec<Duration>| {
        v.sort_unstable();
        v[v.len() / 2]
    };
    let mut idle = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        gpu1.get_bound("srad", 64).await.unwrap();
        idle.push(t.elapsed());
    }
    // A long job on device 0 (slowed by real sleeps), and the same queries on device 1 meanwhile.
    let cal0 = calibration_at(&d, "/org/wcetd/Wcetd1/gpu/0").await;
    let mut finished = cal0.receive_job_finished().await.unwrap();
    let job = cal0.recalibrate(&[]).await.unwrap();
    let mut busy = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        gpu1.get_bound("srad", 64).await.unwrap();
        busy.push(t.elapsed());
    }
    let (state, _, _) = cal0.get_job(job).await.unwrap();
    assert!(
        state == "running" || state == "queued",
        "the job on device 0 must still be going while device 1 answered ({state})"
    );
    let (idle, busy) = (p50(idle), p50(busy));
    println!("GetBound on GPU 1, p50: {idle:?} while GPU 0 idles, {busy:?} while it calibrates");
    assert!(
        busy < idle * 5 + Duration::from_millis(2),
        "queries on GPU 1 slowed from {idle:?} to {busy:?} by a job on GPU 0"
    );
    cal0.cancel_job(job).await.unwrap();
    while let Some(signal) = tokio::time::timeout(WAIT, finished.next()).await.unwrap() {
        if signal.args().unwrap().job == job {
            break;
        }
    }
}

/// The message of the next `JobFinished` on `finished`, which must say `done`.
async fn next_done(finished: &mut wcetd::client::JobFinishedStream) -> String {
    let signal = tokio::time::timeout(WAIT, finished.next())
        .await
        .unwrap()
        .unwrap();
    let args = signal.args().unwrap();
    assert_eq!(args.state, "done", "{}", args.message);
    args.message.to_string()
}

/// A daemon (seed 4, nothing calibrated) that imported `bundle`: it, its `JobFinished` stream,
/// and the import job's message (the job must be done).
async fn imported_by_a_fresh_daemon(
    bundle: &str,
) -> (Daemon, wcetd::client::JobFinishedStream, String) {
    let d = Daemon::start(&["--no-initial-calibration", "--seed", "4"]).await;
    let cal_d = d.calibration().await;
    let mut finished = cal_d.receive_job_finished().await.unwrap();
    cal_d
        .import_calibration_with(bundle, HashMap::new())
        .await
        .unwrap();
    let message = next_done(&mut finished).await;
    (d, finished, message)
}

/// Import `bundle` into `d` (with `force` or not) and wait for the job: its message, and srad's
/// isolated bound and stated exceedance at 16 SMs then.
async fn import_and_read(
    d: &Daemon,
    finished: &mut wcetd::client::JobFinishedStream,
    bundle: &str,
    force: bool,
) -> (String, u64, f64) {
    let options = HashMap::from([("force", zbus::Variant::from(force))]);
    d.calibration()
        .await
        .import_calibration_with(bundle, options)
        .await
        .unwrap();
    let message = next_done(finished).await;
    let info = d
        .bounds()
        .await
        .get_bound_info_tagged("srad", 16, "isolated")
        .await
        .unwrap();
    let bound = u64::try_from(&info["bound_ns"]).unwrap();
    let exceedance = f64::try_from(&info["exceedance"]).unwrap();
    (message, bound, exceedance)
}

/// srad's calibration exported by a daemon (seed 3) that calibrated `kernels`.
async fn srad_bundle(kernels: &[&str]) -> String {
    let a = Daemon::start(&["--no-initial-calibration", "--seed", "3"]).await;
    let (state, message) = calibrate_at(&a, "/org/wcetd/Wcetd1", kernels).await;
    assert_eq!(state, "done", "{message}");
    a.calibration()
        .await
        .export_calibration(&["srad"])
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_is_accepted_with_the_same_fingerprint_and_refused_with_another() {
    let bundle = srad_bundle(&["srad", "hotspot"]).await;
    assert!(bundle.contains("\"kernel\":\"srad\""));

    // Same profile: the same fingerprint (UUIDs are never compared; here they even agree).
    let b = Daemon::start(&["--no-initial-calibration", "--seed", "4"]).await;
    let cal_b = b.calibration().await;
    let mut finished = cal_b.receive_job_finished().await.unwrap();
    let kernels = cal_b
        .import_calibration_with(&bundle, HashMap::new())
        .await
        .unwrap();
    assert_eq!(kernels, vec!["srad".to_string()]);
    let message = next_done(&mut finished).await;
    assert!(
        message.contains("srad (isolated): held on this card") || message.contains("recalibrated"),
        "{message}"
    );
    let info = b.bounds().await.get_bound_info("srad", 64).await.unwrap();
    let origin = <&str>::try_from(&info["origin"]).unwrap().to_string();
    assert!(origin == "bundle" || origin == "measured", "{origin}");
    let stale = bool::try_from(&info["stale"]).unwrap();
    assert!(
        !stale,
        "a bundle of the same configuration is served as current"
    );

    // Another device model: refused with what differs, nothing imported.
    let c = Daemon::start(&["--no-initial-calibration", "--sim-profile", "embedded"]).await;
    let err = c
        .calibration()
        .await
        .import_calibration_with(&bundle, HashMap::new())
        .await
        .unwrap_err();
    assert_eq!(error_name(&err), "org.freedesktop.DBus.Error.InvalidArgs");
    assert!(err.to_string().contains("device `"), "{err}");
    assert!(err.to_string().contains("force"), "{err}");
    let err = c.bounds().await.get_bound("srad", 8).await.unwrap_err();
    assert_eq!(error_name(&err), "org.wcetd.Error.NotCalibrated");

    // A truncated bundle: refused, and says it is not complete.
    let err = c
        .calibration()
        .await
        .import_calibration_with(&bundle[..bundle.len() / 2], HashMap::new())
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("not a complete wcetd bundle"),
        "{err}"
    );
}

/// A bundle never takes a bound below a launch this card timed for the calibration it replaces
/// (rule 1). Forced from another model, it once replaced a simulated H100's own srad bounds with
/// an H200's, served stale but served, below the H100's own launches at most sizes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_is_never_below_launches_this_card_timed() {
    let bundle = srad_bundle(&["srad"]).await;
    let profile = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/calibration/profiles/h100-measured.toml"
    );
    let b = Daemon::start(&[
        "--no-initial-calibration",
        "--seed",
        "5",
        "--sim-profile",
        profile,
    ])
    .await;
    let (state, message) = calibrate_at(&b, "/org/wcetd/Wcetd1", &["srad"]).await;
    assert_eq!(state, "done", "{message}");
    let bounds = b.bounds().await;
    let sizes = bounds.partition_sizes().await.unwrap();
    let mut own = Vec::new();
    for &m in &sizes {
        let info = bounds
            .get_bound_info_tagged("srad", m, "isolated")
            .await
            .unwrap();
        // Measured there, or seen by the verification sweep there.
        let max = |key: &str| u64::try_from(&info[key]).unwrap();
        own.push(max("observed_max_ns").max(max("verified_max_ns")));
    }
    let mut finished = b.calibration().await.receive_job_finished().await.unwrap();
    // Twice: the second import replaces a bundle's calibration, which must still carry them;
    // and once more with the code digest deleted, as an older exporter wrote bundles.
    let mut no_code: serde_json::Value = serde_json::from_str(&bundle).unwrap();
    for e in no_code["calibrations"].as_array_mut().unwrap() {
        e["calibration"]["code"] = "".into();
    }
    let no_code = serde_json::to_string(&no_code).unwrap();
    for bundle in [&bundle, &bundle, &no_code] {
        let (message, ..) = import_and_read(&b, &mut finished, bundle, true).await;
        assert!(message.contains("launches this card timed"), "{message}");
        for (&m, &launch) in sizes.iter().zip(&own) {
            let info = bounds
                .get_bound_info_tagged("srad", m, "isolated")
                .await
                .unwrap();
            assert_eq!(<&str>::try_from(&info["origin"]).unwrap(), "bundle");
            let bound = u64::try_from(&info["bound_ns"]).unwrap();
            assert!(
                bound >= launch,
                "{m} SMs: bound {bound} below a launch of {launch} timed here"
            );
        }
    }
}

/// An export carries what production reported on this card: a bound an overrun raised is
/// exported raised (launches and summaries as timed), so an importer does not serve the
/// campaign's bound below a time this card already saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_carries_the_bounds_production_raised() {
    let a = Daemon::start(&["--no-initial-calibration", "--seed", "3"]).await;
    let (state, message) = calibrate_at(&a, "/org/wcetd/Wcetd1", &["srad"]).await;
    assert_eq!(state, "done", "{message}");
    let late = 8 * a.bounds().await.get_bound("srad", 64).await.unwrap();
    monitor_at(&a, "/org/wcetd/Wcetd1")
        .await
        .report("srad", 64, &[late])
        .await
        .unwrap();
    let bundle = a
        .calibration()
        .await
        .export_calibration(&["srad"])
        .await
        .unwrap();
    let bundle: serde_json::Value = serde_json::from_str(&bundle).unwrap();
    for entry in bundle["calibrations"].as_array().unwrap() {
        let at64 = entry["calibration"]["table"]["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["sms"] == 64)
            .unwrap();
        let bound = at64["bound_ns"].as_u64().unwrap();
        assert!(
            bound >= late,
            "{}: {bound} below {late}",
            entry["interference"]
        );
    }
    // And the bundle still agrees with itself: another daemon takes it.
    let (_, _, message) =
        imported_by_a_fresh_daemon(&serde_json::to_string(&bundle).unwrap()).await;
    assert!(message.contains("srad"), "{message}");
}

/// `wcetctl import-calibration` says what becomes of the bounds: checked on this card where the
/// configuration matches; with --force, a bundle of another configuration is served stale and
/// unchecked until recalibrated (it once said they were checked, which no job does for them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_import_says_its_bounds_are_served_stale_and_unchecked() {
    let bundle = srad_bundle(&["srad"]).await;
    let mut v: serde_json::Value = serde_json::from_str(&bundle).unwrap();
    v["fingerprint"]["driver"] = "999.0".into();
    for c in v["calibrations"].as_array_mut().unwrap() {
        c["calibration"]["campaign"]["environment"]["fingerprint"]["driver"] = "999.0".into();
    }
    let d = Daemon::start(&["--no-initial-calibration", "--seed", "4"]).await;
    let file = d.dir.path().join("other.json");
    std::fs::write(&file, v.to_string()).unwrap();
    let mut finished = d.calibration().await.receive_job_finished().await.unwrap();
    let file = file.to_str().unwrap();
    let (ok, out, err) = common::wcetctl(d.bus.address(), &["import-calibration", "--force", file]);
    assert!(ok, "{err}");
    assert!(
        out.contains("served stale, unchecked on this card, until recalibrated")
            && out.contains("wcetctl recalibrate srad"),
        "{out}"
    );
    next_done(&mut finished).await;
    let info = d.bounds().await.get_bound_info("srad", 16).await.unwrap();
    assert!(bool::try_from(&info["stale"]).unwrap(), "served as current");

    // Without --force only a matching bundle is taken, and it is checked here.
    let file = d.dir.path().join("same.json");
    std::fs::write(&file, &bundle).unwrap();
    let file = file.to_str().unwrap();
    let (ok, out, err) = common::wcetctl(d.bus.address(), &["import-calibration", file]);
    assert!(ok, "{err}");
    assert!(
        out.contains("is queued as a job") && out.contains("checked on this card"),
        "{out}"
    );
    assert!(!out.contains("stale"), "{out}");
    next_done(&mut finished).await;
}

/// A bundle edited so that it no longer agrees with itself is refused whole, `force` or not:
/// a header naming another configuration than its campaigns (which `force` would have imported
/// as current and unchecked), a size left out, a launch deleted with the bound lowered to what
/// remains, a calibration given twice. Nothing of it is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_bundle_is_refused_even_with_force() {
    let bundle = srad_bundle(&["srad"]).await;
    let original: serde_json::Value = serde_json::from_str(&bundle).unwrap();
    let edit = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut v = original.clone();
        f(&mut v);
        v.to_string()
    };
    fn cal(v: &mut serde_json::Value) -> &mut serde_json::Value {
        &mut v["calibrations"][0]["calibration"]
    }
    let header = edit(&|v| v["fingerprint"]["driver"] = "999.0".into());
    // Every trace of one size removed, consistently.
    let size_left_out = edit(&|v| {
        let entry = &mut v["calibrations"][0];
        entry["summary"].as_object_mut().unwrap().remove("16");
        let c = &mut entry["calibration"];
        c["campaign"]["sizes"].as_object_mut().unwrap().remove("16");
        let entries = c["table"]["entries"].as_array_mut().unwrap();
        entries.retain(|e| e["sms"] != 16);
    });
    let launch_deleted = edit(&|v| {
        let c = cal(v);
        let sizes = c["campaign"]["sizes"].as_object_mut().unwrap();
        let (m, record) = sizes.iter_mut().next().unwrap();
        let m: u64 = m.parse().unwrap();
        let times = record["times_ns"].as_array_mut().unwrap();
        let (at, _) = times
            .iter()
            .enumerate()
            .max_by_key(|(_, t)| t.as_u64())
            .unwrap();
        times.remove(at);
        let left = times.iter().filter_map(|t| t.as_u64()).max().unwrap();
        for e in c["table"]["entries"].as_array_mut().unwrap() {
            if e["sms"] == m {
                e["observed_max_ns"] = left.into();
                e["bound_ns"] = (left + 1).into();
            }
        }
    });
    // The table says measured where the campaign ships no launch.
    let measured_without_launches = edit(&|v| {
        let entry = &mut v["calibrations"][0];
        entry["summary"].as_object_mut().unwrap().remove("48");
        let c = &mut entry["calibration"];
        c["campaign"]["sizes"].as_object_mut().unwrap().remove("48");
    });
    // A measured size called fitted (a table without a tail states its guarantee from the
    // fewest launches at a measured size).
    let measured_called_fitted = edit(&|v| {
        for e in cal(v)["table"]["entries"].as_array_mut().unwrap() {
            if e["sms"] == 48 {
                e["provenance"] = "fitted".into();
            }
        }
    });
    let stronger_than_its_parts = edit(&|v| {
        cal(v)["table"]["tail"]["exceedance"] = 1e-12.into();
    });
    let twice = edit(&|v| {
        let first = v["calibrations"][0].clone();
        v["calibrations"].as_array_mut().unwrap().push(first);
    });
    // Bounds of other code than this daemon loads as srad: stale on arrival, and a black-box
    // run saw them take the place of the current bounds.
    let other_code = edit(&|v| cal(v)["code"] = "0123456789abcdef".into());
    // Text a terminal would act on, printed raw by `wcetctl bound`.
    let escape_in_a_note = edit(&|v| {
        let notes = cal(v)["table"]["notes"].as_array_mut().unwrap();
        notes.push("fine\n\u{1b}[31mnot fine".into());
    });
    let escape_in_the_host = edit(&|v| v["host"] = "n1\u{1b}]0;owned\u{7}".into());
    let d = Daemon::start(&["--no-initial-calibration", "--seed", "4"]).await;
    let cal_d = d.calibration().await;
    for (text, why) in [
        (&header, "driver `999.0` in the bundle's header"),
        (&size_left_out, "srad (isolated) has no bound at 16 SMs"),
        (&launch_deleted, "the summary says"),
        (&twice, "srad (isolated) appears twice"),
        (
            &other_code,
            "other code than this daemon loads under the names srad",
        ),
        (
            &stronger_than_its_parts,
            "the tail states 1e-12 per launch, stronger than the",
        ),
        (
            &measured_called_fitted,
            "at 48 SMs: the campaign ships launches there, the table says fitted",
        ),
        (&escape_in_a_note, "or a note holds control characters"),
        (&escape_in_the_host, "its host holds control characters"),
        (
            &measured_without_launches,
            "at 48 SMs: the table says measured (120 samples), the campaign ships no launch there",
        ),
    ] {
        let force = HashMap::from([("force", zbus::Variant::from(true))]);
        let err = cal_d
            .import_calibration_with(text, force)
            .await
            .unwrap_err();
        assert_eq!(error_name(&err), "org.freedesktop.DBus.Error.InvalidArgs");
        assert!(
            err.to_string().contains(why) && err.to_string().contains("nothing imported"),
            "{err}"
        );
    }
    // Refused, and the refusal, which quotes the field, carries no escape sequence either.
    let escape_in_the_driver = edit(&|v| v["fingerprint"]["driver"] = "999\u{1b}[2J".into());
    let force = HashMap::from([("force", zbus::Variant::from(true))]);
    let err = cal_d
        .import_calibration_with(&escape_in_the_driver, force)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("driver holds control characters"), "{err}");
    assert!(!err.contains('\u{1b}') && err.contains("\\u{1b}"), "{err}");
    assert!(
        cal_d.list_jobs().await.unwrap().is_empty(),
        "nothing queued"
    );
    let err = d.bounds().await.get_bound("srad", 8).await.unwrap_err();
    assert_eq!(error_name(&err), "org.wcetd.Error.NotCalibrated");
}

/// A bundle edited so that it agrees with itself (a size's slowest launches deleted, its summary,
/// sample count and bound lowered to what is left, a stronger exceedance claimed) passes every
/// check of its own numbers, and `force` skips the check on this card; what it ships is refitted
/// here, and nothing published is tighter than that refit. A bundle as exported moves little.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_is_never_tighter_than_this_daemons_fit_of_its_launches() {
    let bundle = srad_bundle(&["srad"]).await;
    let (d, mut finished, message) = imported_by_a_fresh_daemon(&bundle).await;
    // As exported, the refit may differ a little (slowdowns are judged from other launches
    // here): never below the bundle's bounds, and not far above them.
    assert!(
        message.contains("srad (isolated): held on this card"),
        "{message}"
    );
    {
        let shipped: serde_json::Value = serde_json::from_str(&bundle).unwrap();
        let bounds = d.bounds().await;
        for e in shipped["calibrations"][0]["calibration"]["table"]["entries"]
            .as_array()
            .unwrap()
        {
            let m = e["sms"].as_u64().unwrap() as u32;
            let theirs = e["bound_ns"].as_u64().unwrap();
            let served = bounds
                .get_bound_tagged("srad", m, "isolated")
                .await
                .unwrap();
            assert!(
                served >= theirs && served as f64 <= theirs as f64 * 1.05,
                "{m} SMs: {served} served, {theirs} shipped; {message}"
            );
        }
    }

    // A stronger guarantee claimed, nothing else edited, the same configuration: stated as this
    // daemon states its own, not as the file says.
    let mut claim: serde_json::Value = serde_json::from_str(&bundle).unwrap();
    // (Its additive part too: a tail stronger than its own additive part is refused outright.)
    for c in claim["calibrations"].as_array_mut().unwrap() {
        c["calibration"]["table"]["tail"]["exceedance"] = 1e-12.into();
        c["calibration"]["table"]["tail"]["additive_exceedance"] = 1e-12.into();
    }
    let (message, _, exceedance) =
        import_and_read(&d, &mut finished, &claim.to_string(), false).await;
    assert!(message.contains("not the 1e-12 it claimed"), "{message}");
    assert!(exceedance >= 5e-10, "the claimed {exceedance:e} was kept");

    let mut v: serde_json::Value = serde_json::from_str(&bundle).unwrap();
    v["fingerprint"]["driver"] = "999.0".into();
    let entry = &mut v["calibrations"][0];
    let m = 16u64;
    let key = m.to_string();
    let c = &mut entry["calibration"];
    c["campaign"]["environment"]["fingerprint"]["driver"] = "999.0".into();
    let times = c["campaign"]["sizes"][&key]["times_ns"]
        .as_array_mut()
        .unwrap();
    let mut sorted: Vec<u64> = times.iter().map(|t| t.as_u64().unwrap()).collect();
    sorted.sort_unstable();
    let cut = sorted[sorted.len() - 4];
    times.retain(|t| t.as_u64().unwrap() <= cut);
    let n = times.len() as u64;
    for e in c["table"]["entries"].as_array_mut().unwrap() {
        if e["sms"] == m {
            e["samples"] = n.into();
            e["observed_max_ns"] = cut.into();
            e["bound_ns"] = (cut + 1).into();
        }
    }
    c["table"]["tail"]["exceedance"] = 1e-12.into();
    c["table"]["tail"]["additive_exceedance"] = 1e-12.into();
    entry["summary"][&key]["launches"] = n.into();
    entry["summary"][&key]["max_ns"] = cut.into();
    for other in v["calibrations"].as_array_mut().unwrap().iter_mut().skip(1) {
        other["calibration"]["campaign"]["environment"]["fingerprint"]["driver"] = "999.0".into();
    }
    let (message, bound, exceedance) =
        import_and_read(&d, &mut finished, &v.to_string(), true).await;
    assert!(message.contains("refitted here"), "{message}");
    assert!(bound > cut + 1, "{bound} <= the forged {}", cut + 1);
    assert!(
        exceedance > 1e-12,
        "the forged claim {exceedance:e} was kept"
    );
}

/// A bundle whose calibration rests partly on the verification sweep (a small budget, so not
/// every size is measured) keeps what each size rests on through the refit: a verified size
/// stays `verified`, with the sweep's launches, and its bound is never below the bundle's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_with_verified_sizes_keeps_their_basis() {
    let a = Daemon::start(&[
        "--no-initial-calibration",
        "--seed",
        "3",
        "--calibration-budget",
        "0",
    ])
    .await;
    assert_eq!(a.recalibrate(&["hotspot"]).await.0, "done");
    let bundle = a
        .calibration()
        .await
        .export_calibration(&["hotspot"])
        .await
        .unwrap();
    let shipped: serde_json::Value = serde_json::from_str(&bundle).unwrap();
    let entries = shipped["calibrations"][0]["calibration"]["table"]["entries"]
        .as_array()
        .unwrap()
        .clone();
    let verified: Vec<u32> = entries
        .iter()
        .filter(|e| e["verified_samples"].as_u64().unwrap_or(0) > 0)
        .map(|e| e["sms"].as_u64().unwrap() as u32)
        .collect();
    assert!(!verified.is_empty(), "the sweep verified no size");
    let (d, _, message) = imported_by_a_fresh_daemon(&bundle).await;
    assert!(
        message.contains("hotspot (isolated): held on this card"),
        "{message}"
    );
    let bounds = d.bounds().await;
    for e in &entries {
        let m = e["sms"].as_u64().unwrap() as u32;
        let info = bounds
            .get_bound_info_tagged("hotspot", m, "isolated")
            .await
            .unwrap();
        let served = u64::try_from(&info["bound_ns"]).unwrap();
        assert!(served >= e["bound_ns"].as_u64().unwrap(), "{m} SMs");
        let basis = <&str>::try_from(&info["basis"]).unwrap().to_string();
        assert_eq!(
            basis == "verified",
            verified.contains(&m),
            "{m} SMs: {basis}"
        );
    }
}

/// `bundle` with every number under the keys that hold times or bounds (and every launch time)
/// passed through `f`: the bundle stays consistent with itself, as from a faster or slower card.
fn with_times(bundle: &str, f: &dyn Fn(u64) -> u64) -> String {
    fn walk(v: &mut serde_json::Value, timed: bool, f: &dyn Fn(u64) -> u64) {
        const TIMES: [&str; 5] = [
            "bound_ns",
            "observed_max_ns",
            "median_ns",
            "max_ns",
            "times_ns",
        ];
        match v {
            serde_json::Value::Object(map) => {
                for (k, x) in map.iter_mut() {
                    walk(x, TIMES.contains(&k.as_str()), f);
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(|x| walk(x, timed, f)),
            serde_json::Value::Number(n) if timed => {
                *v = f(n.as_u64().expect("times are whole nanoseconds")).into();
            }
            _ => {}
        }
    }
    let mut v: serde_json::Value = serde_json::from_str(bundle).unwrap();
    walk(&mut v, false, f);
    v.to_string()
}

/// A bundle is never served before it held on this card, nor with a bound below a launch it
/// records: an edited bundle is refused, and one from a faster card (every time halved) is
/// recalibrated here without its bounds ever being served (they were, until a review found it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_is_served_only_once_it_held_on_this_card() {
    let bundle = srad_bundle(&["srad"]).await;
    let b = Daemon::start(&["--no-initial-calibration", "--seed", "4"]).await;
    let cal_b = b.calibration().await;
    let bounds_b = b.bounds().await;

    // Bounds below the bundle's own launches: refused, and nothing is served.
    let edited = {
        let mut v: serde_json::Value = serde_json::from_str(&bundle).unwrap();
        for e in v["calibrations"][0]["calibration"]["table"]["entries"]
            .as_array_mut()
            .unwrap()
        {
            e["bound_ns"] = 1000.into();
        }
        v.to_string()
    };
    let err = cal_b
        .import_calibration_with(&edited, HashMap::new())
        .await
        .unwrap_err();
    assert_eq!(error_name(&err), "org.freedesktop.DBus.Error.InvalidArgs");
    assert!(
        err.to_string().contains("below launches it records"),
        "{err}"
    );
    let err = bounds_b.get_bound("srad", 64).await.unwrap_err();
    assert_eq!(error_name(&err), "org.wcetd.Error.NotCalibrated");

    // Consistent with itself but from a card twice as fast: its bounds fail the check here.
    let fast = with_times(&bundle, &|t| t / 2);
    let fast_bound_64 = serde_json::from_str::<serde_json::Value>(&fast).unwrap()["calibrations"]
        [0]["calibration"]["table"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["sms"] == 64)
        .unwrap()["bound_ns"]
        .as_u64()
        .unwrap();
    let mut finished = cal_b.receive_job_finished().await.unwrap();
    let mut progress = cal_b.receive_job_progress().await.unwrap();
    cal_b
        .import_calibration_with(&fast, HashMap::new())
        .await
        .unwrap();
    let mut served_meanwhile = Vec::new();
    let mut progressed = Vec::new();
    let done = tokio::time::timeout(WAIT, async {
        loop {
            // Progress first: a signal sent before the job finished is read before its end.
            tokio::select! {
                biased;
                signal = progress.next() => progressed.push(signal.unwrap().args().unwrap().progress),
                signal = finished.next() => break signal.unwrap(),
                served = bounds_b.get_bound("srad", 64) => served_meanwhile.extend(served.ok()),
            }
        }
    })
    .await
    .unwrap();
    let args = done.args().unwrap();
    assert_eq!(args.state, "done", "{}", args.message);
    assert!(args.message.contains("recalibrated"), "{}", args.message);
    // The check and the recalibration report progress as they go, never backwards.
    assert!(
        progressed.windows(2).all(|w| w[0] <= w[1])
            && progressed.iter().any(|&p| p > 0.3 && p < 1.0),
        "{progressed:?}"
    );
    let after = bounds_b.get_bound("srad", 64).await.unwrap();
    assert!(after > fast_bound_64, "{after} ns");
    // Nothing but the recalibration was published: no reply during the job may be a bound of
    // the fast card's (about half of this card's).
    let lowest = served_meanwhile.iter().min();
    assert!(
        lowest.is_none_or(|&b| b * 4 >= after * 3),
        "served {lowest:?} ns at 64 SMs while the bundle was checked; {after} ns after"
    );
    for m in [8u32, 64, 132] {
        let info = bounds_b.get_bound_info("srad", m).await.unwrap();
        let bound = u64::try_from(&info["bound_ns"]).unwrap();
        let seen = u64::try_from(&info["observed_max_ns"])
            .unwrap()
            .max(u64::try_from(&info["verified_max_ns"]).unwrap());
        assert!(
            bound >= seen,
            "{m} SMs: {bound} ns below a launch of {seen} ns"
        );
        assert_eq!(<&str>::try_from(&info["origin"]).unwrap(), "measured");
    }
}

async fn monitor_at(d: &Daemon, path: &str) -> Monitor1Proxy<'static> {
    Monitor1Proxy::builder(&d.conn)
        .path(path.to_string())
        .build()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_judge_their_own_device_and_the_metrics_file_covers_every_device() {
    let out = tempfile::tempdir().unwrap();
    let prom = out.path().join("wcetd.prom");
    let metrics = ["--metrics-file", prom.to_str().unwrap()];
    let mut d = Daemon::start(&[TWO_IDLE_GPUS, &metrics].concat()).await;
    const GPU1: &str = "/org/wcetd/Wcetd1/gpu/1";
    for path in [GPU1, "/org/wcetd/Wcetd1/gpu/0"] {
        let (state, message) = calibrate_at(&d, path, &["srad"]).await;
        assert_eq!(state, "done", "{message}");
    }
    let (gpu0, gpu1) = (
        bounds_at(&d, "/org/wcetd/Wcetd1/gpu/0").await,
        bounds_at(&d, GPU1).await,
    );
    let (bound0, bound1) = (
        gpu0.get_bound("srad", 64).await.unwrap(),
        gpu1.get_bound("srad", 64).await.unwrap(),
    );
    let mon1 = monitor_at(&d, GPU1).await;
    let root = monitor_at(&d, wcetd::bus::OBJECT_PATH).await;
    let mut exceeded = mon1.receive_bound_exceeded().await.unwrap();
    let mut at_root = root.receive_bound_exceeded().await.unwrap();
    let late = bound1 * 2;
    mon1.report("srad", 64, &[late]).await.unwrap();
    let signal = tokio::time::timeout(WAIT, exceeded.next())
        .await
        .expect("BoundExceeded on GPU 1 in time")
        .unwrap();
    let args = signal.args().unwrap();
    assert_eq!((args.observed_ns, args.bound_ns), (late, bound1));

    // GPU 1 raised its bound and lists the kernel; GPU 0 (the root) saw nothing.
    assert_eq!(gpu1.get_bound("srad", 64).await.unwrap(), late);
    assert_eq!(gpu0.get_bound("srad", 64).await.unwrap(), bound0);
    assert_eq!(
        mon1.overrun_kernels().await.unwrap(),
        vec!["srad".to_string()]
    );
    assert!(root.overrun_kernels().await.unwrap().is_empty());
    let seen0 = monitor_at(&d, "/org/wcetd/Wcetd1/gpu/0")
        .await
        .get_observed("srad", 64)
        .await
        .unwrap();
    assert_eq!(u64::try_from(&*seen0["count"]).unwrap(), 0);
    // The root's signal stream is GPU 0's: the overrun on GPU 1 never reached it. A report on
    // GPU 0 does, and is the first thing the stream yields.
    let root_late = bound0 * 3;
    root.report("srad", 64, &[root_late]).await.unwrap();
    let first = tokio::time::timeout(WAIT, at_root.next())
        .await
        .expect("BoundExceeded at the root in time")
        .unwrap();
    assert_eq!(first.args().unwrap().observed_ns, root_late);

    // A clean stop writes the file once more: both devices, each under its own labels.
    let pid = d.child.id().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    assert!(d.child.wait().unwrap().success());
    let text = std::fs::read_to_string(&prom).unwrap();
    let exp = prom_text::check(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    if let Some(r) = prom_text::promtool(&text) {
        r.unwrap_or_else(|e| panic!("promtool check metrics: {e}"));
    }
    let at = |gpu| [("gpu", gpu), ("kernel", "srad"), ("sms", "64")];
    let seconds = |ns: u64| ns as f64 / 1e9;
    assert_eq!(
        exp.value("wcetd_bound_seconds", &at("1")),
        Some(seconds(late))
    );
    assert_eq!(
        exp.value("wcetd_bound_seconds", &at("0")),
        Some(seconds(root_late))
    );
    assert_eq!(exp.value("wcetd_overruns_total", &at("1")), Some(1.0));
    assert_eq!(exp.value("wcetd_overruns_total", &at("0")), Some(1.0));
    for gpu in ["0", "1"] {
        assert_eq!(
            exp.value("wcetd_health", &[("gpu", gpu), ("state", "ok")]),
            Some(1.0)
        );
    }
}
