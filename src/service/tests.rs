//! The service's own tests: the state and the job queue driven on the simulator, without a bus.

use super::*;
use crate::gpu::sim::{DeviceProfile, SimGpu, SimOptions};

#[test]
fn partitions_the_placement_probe_refused_make_health_degraded_and_say_which() {
    let mut device = SimGpu::new(DeviceProfile::h200(), SimOptions::default())
        .info()
        .clone();
    assert_eq!(
        initial_health(&device, None, &[], &[], &[], "wcetctl"),
        "ok"
    );
    device.unusable_sizes = vec![(96, "SM 3 ran blocks of both".into())];
    let h = initial_health(&device, None, &[], &[], &[], "wcetctl");
    assert!(h.starts_with("degraded: partitions refused"), "{h}");
    assert!(h.contains("96 SMs (SM 3 ran blocks of both)"), "{h}");
}

/// Short campaigns, no delay probe and no initial job.
fn short_campaigns() -> ServiceConfig {
    let mut config = ServiceConfig::default();
    config.recipe.campaign.launches = 40;
    config.recipe.campaign.screen_launches = 200;
    config.recipe.campaign.heavy_tail_launches = 400;
    config.recipe.delay_probe_launches = 0;
    config.initial_calibration = false;
    config
}

/// A service with [`short_campaigns`] on the simulated H200.
fn short_campaign_service(state: &std::path::Path) -> Service {
    short_campaign_service_on(DeviceProfile::h200(), state)
}

/// A service with [`short_campaigns`] on a simulated device of `profile`.
fn short_campaign_service_on(profile: DeviceProfile, state: &std::path::Path) -> Service {
    let gpu = SimGpu::new(profile, SimOptions::default());
    Service::start(
        Box::new(gpu),
        Store::open(state).unwrap(),
        short_campaigns(),
    )
    .0
}

/// Calibrate srad in `state` as [`srad_calibrated`] does, stop, and `edit` the stored file as
/// JSON: a calibration as an earlier run (at another clock, of other code) left it.
fn srad_calibrated_then_edited(state: &std::path::Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let calibrated = srad_calibrated(state);
    let path = Store::open(state)
        .unwrap()
        .path_for(&calibrated.device().fingerprint);
    drop(calibrated);
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut v);
    // Edited, so no longer what its checksum says: read as a hand edit.
    v.as_object_mut().unwrap().remove("checksum");
    std::fs::write(&path, v.to_string()).unwrap();
}

/// [`short_campaign_service`] with srad calibrated, isolated and contended.
fn srad_calibrated(state: &std::path::Path) -> Service {
    srad_calibrated_with(short_campaigns(), state)
}

/// A service of `config` on the simulated H200 with srad calibrated.
fn srad_calibrated_with(config: ServiceConfig, state: &std::path::Path) -> Service {
    let gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
    let service = Service::start(Box::new(gpu), Store::open(state).unwrap(), config).0;
    let mut events = service.subscribe();
    let job = service.recalibrate(&["srad".to_string()]).unwrap();
    while !service.job(job).unwrap().state.finished() {
        let _ = events.blocking_recv();
    }
    service
}

/// Isolated bounds are published when the isolated part of a job is done, before the
/// contended part runs: two `BoundsChanged`, the first naming isolated bounds alone, then
/// `JobFinished`.
#[test]
fn each_interference_is_published_as_soon_as_it_is_measured() {
    let dir = tempfile::tempdir().unwrap();
    let service = short_campaign_service(dir.path());
    let mut events = service.subscribe();
    let job = service.recalibrate(&["srad".to_string()]).unwrap();
    let mut seen = Vec::new();
    loop {
        match events.blocking_recv().unwrap() {
            Event::BoundsChanged { .. } => {
                let tags = [Interference::Isolated, Interference::Contended]
                    .map(|tag| service.bound_info("srad", 64, Some(tag)).is_ok());
                seen.push(format!("bounds {tags:?}"));
            }
            Event::JobFinished {
                job: j,
                state,
                message,
            } if j == job => {
                assert_eq!(state, JobState::Done, "{message}");
                assert_eq!(
                    message,
                    "calibrated srad (isolated); calibrated srad (contended)"
                );
                break;
            }
            _ => {}
        }
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[1], "bounds [true, true]");
    // Whether the contended bound already exists when the first signal is handled depends on
    // how fast the worker is; that the isolated one does, does not.
    assert!(seen[0].starts_with("bounds [true,"), "{seen:?}");
}

/// An untagged bound is stated at the weaker of its calibrations' guarantees, at every size:
/// a heavy-tailed isolated calibration (1e-4) under a larger contended bound (1e-9) made
/// `GetBoundInfo` claim 1e-9 where admission, rightly, said 1e-4.
#[test]
fn an_untagged_bound_states_the_weaker_guarantee_of_its_calibrations() {
    let dir = tempfile::tempdir().unwrap();
    let service = short_campaign_service(dir.path());
    let sizes = service.device().partition_sizes.clone();
    let mut seed = 12345u64;
    let mut uniform = move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((seed >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    let mut import = |tag, slower: f64, heavy: bool| {
        let mut samples = Vec::new();
        for &m in &sizes {
            let base = 1e7 / f64::from(m) + 20_000.0;
            for i in 0..500 {
                let mut t = base * slower * (1.0 + 0.005 * uniform());
                if heavy && i % 50 == 0 {
                    t += base * 0.05 * uniform().powf(-1.0 / 1.5);
                }
                samples.push((m, t as u64));
            }
        }
        let options = ImportOptions {
            geometry: None,
            interference: tag,
            source: "test".into(),
            batch_slowdown: None,
        };
        let mut events = service.subscribe();
        let job = service.import_samples("lab.k", &samples, options).unwrap();
        while !service.job(job).unwrap().state.finished() {
            let _ = events.blocking_recv();
        }
        assert_eq!(service.job(job).unwrap().state, JobState::Done);
    };
    import(Interference::Isolated, 1.0, true);
    import(Interference::Contended, 10.0, false);
    let stated = |tag| {
        service
            .bound_info("lab.k", 64, tag)
            .unwrap()
            .guarantee
            .exceedance
    };
    let (iso, cont) = (
        stated(Some(Interference::Isolated)),
        stated(Some(Interference::Contended)),
    );
    assert!(
        iso > cont,
        "the test needs a weaker isolated guarantee: {iso:e}, {cont:e}"
    );
    let bound = |tag| service.bound("lab.k", 64, Some(tag)).unwrap();
    assert!(
        bound(Interference::Contended) > bound(Interference::Isolated),
        "the test needs the contended bound to be the larger"
    );
    for &m in &sizes {
        let info = service.bound_info("lab.k", m, None).unwrap();
        assert_eq!(info.guarantee.exceedance, iso, "{m} SMs");
    }
    let info = service.bound_info("lab.k", 64, None).unwrap();
    assert!(
        info.notes
            .iter()
            .any(|n| n.contains("the other interference's guarantee")),
        "{:?}",
        info.notes
    );
}

/// Imports `samples(size, i)` of `kernel` under `tag` and waits for the job to be done.
fn import_and_wait(
    service: &Service,
    kernel: &str,
    tag: Interference,
    samples: impl Fn(u32, u32) -> u64,
) {
    let samples: Vec<(u32, u64)> = service
        .device()
        .partition_sizes
        .iter()
        .flat_map(|&m| (0..200).map(move |i| (m, i)))
        .map(|(m, i)| (m, samples(m, i)))
        .collect();
    let options = ImportOptions {
        geometry: None,
        interference: tag,
        source: "test".into(),
        batch_slowdown: None,
    };
    let mut events = service.subscribe();
    let job = service.import_samples(kernel, &samples, options).unwrap();
    while !service.job(job).unwrap().state.finished() {
        let _ = events.blocking_recv();
    }
    assert_eq!(service.job(job).unwrap().state, JobState::Done);
}

/// `GetBound` is never below `GetBoundTagged` of either tag, after production floors too: with
/// a non-monotone isolated calibration slightly above a monotone contended one at small sizes,
/// the untagged bound was the isolated one there, which does not carry a time reported at a
/// larger size down, while the contended one does: 26,641 ns served beside a contended bound
/// of 10,000,000 (a black-box review found it; MinPartition then chose a size admission
/// refused).
#[test]
fn an_untagged_bound_is_never_below_a_tagged_one_after_a_report() {
    let dir = tempfile::tempdir().unwrap();
    let service = short_campaign_service(dir.path());
    // A fixed jitter of up to 3%, the same at every size and tag.
    let jitter = |i: u32| 1.0 + 0.03 * f64::from(i * 37 % 200) / 200.0;
    import_and_wait(&service, "lab.x", Interference::Isolated, |m, i| {
        let m = f64::from(m);
        ((800_000.0 / m + 200.0 * m) * jitter(i)) as u64
    });
    import_and_wait(&service, "lab.x", Interference::Contended, |m, i| {
        ((400_000.0 / f64::from(m) + 5_000.0) * jitter(i)) as u64
    });
    let sizes = service.device().partition_sizes.clone();
    let largest = *sizes.last().unwrap();
    let late = 10 * service.bound("lab.x", largest, None).unwrap();
    service.report("lab.x", largest, None, &[late]).unwrap();
    let bound = |m, tag| service.bound("lab.x", m, tag).unwrap();
    let mut below_late = 0;
    for &m in &sizes {
        let tagged = [Interference::Isolated, Interference::Contended].map(|t| bound(m, Some(t)));
        let untagged = bound(m, None);
        assert!(
            untagged >= tagged[0] && untagged >= tagged[1],
            "{m} SMs: GetBound {untagged}, isolated {}, contended {}",
            tagged[0],
            tagged[1]
        );
        assert_eq!(
            service.bound_info("lab.x", m, None).unwrap().entry.bound_ns,
            untagged
        );
        below_late += usize::from(tagged[0] < late);
    }
    assert!(
        below_late > 0,
        "the test needs an isolated bound the report does not raise"
    );
}

/// Where one tag's table has no entry at a size (deleted by hand, or a size the device did not
/// realise when the table was made), no untagged bound is served there: it answers for that
/// tag too. It was answered from the other tag's entry and this table's next smaller size, which
/// for a kernel slower on more SMs is below what the missing entry said (a review found it).
/// The other tag's own bound, and every other size, are still served.
#[test]
fn no_untagged_bound_is_served_where_a_tag_has_no_entry() {
    let dir = tempfile::tempdir().unwrap();
    let service = short_campaign_service(dir.path());
    let jitter = |i: u32| 1.0 + 0.01 * f64::from(i * 37 % 200) / 200.0;
    // Slower on the largest sizes than on the ones below them; contended launches in between.
    let isolated = |m: u32| 1e6 / f64::from(m) + 400.0 * f64::from(m);
    let sizes = service.device().partition_sizes.clone();
    let (largest, below) = (sizes[sizes.len() - 1], sizes[sizes.len() - 2]);
    let contended = (isolated(largest) + isolated(below)) / 2.0;
    import_and_wait(&service, "lab.y", Interference::Isolated, |m, i| {
        (isolated(m) * jitter(i)) as u64
    });
    import_and_wait(&service, "lab.y", Interference::Contended, |_, i| {
        (contended * jitter(i)) as u64
    });
    let deleted = service
        .bound("lab.y", largest, Some(Interference::Isolated))
        .unwrap();
    let path = Store::open(dir.path())
        .unwrap()
        .path_for(&service.device().fingerprint);
    drop(service);
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let entries = v["kernels"]["lab.y"]["table"]["entries"]
        .as_array_mut()
        .unwrap();
    assert_eq!(entries.pop().unwrap()["sms"], largest);
    // Edited, so no longer what its checksum says: read as a hand edit.
    v.as_object_mut().unwrap().remove("checksum");
    std::fs::write(&path, v.to_string()).unwrap();

    let service = short_campaign_service(dir.path());
    let err = service.bound("lab.y", largest, None);
    assert!(
        matches!(&err, Err(ServiceError::NotCalibrated(e))
            if e.contains(&format!("no isolated bound at {largest} SMs"))
                && e.contains("import --interference isolated")),
        "{err:?}: the isolated entry deleted said {deleted} ns"
    );
    assert!(service.bound_info("lab.y", largest, None).is_err());
    assert!(service
        .bound("lab.y", largest, Some(Interference::Isolated))
        .is_err());
    let other = service.bound("lab.y", largest, Some(Interference::Contended));
    assert!(other.is_ok(), "{other:?}");
    for &m in &sizes[..sizes.len() - 1] {
        let untagged = service.bound("lab.y", m, None).unwrap();
        for t in [Interference::Isolated, Interference::Contended] {
            assert!(
                untagged >= service.bound("lab.y", m, Some(t)).unwrap(),
                "{m} SMs"
            );
        }
    }
    // Said in Health, and skipped where the smallest size meeting a deadline is asked for: a
    // smaller one that meets it is still given (one refused size failed the whole answer).
    let health = service.health();
    assert!(
        health.contains(&format!(
            "kernel `lab.y` has no isolated bound at {largest} SMs"
        )),
        "{health}"
    );
    let loose = service.bound("lab.y", sizes[0], None).unwrap();
    assert_eq!(
        service.min_partition("lab.y", loose, None).unwrap().0,
        sizes[0]
    );
    let tight = service
        .bound("lab.y", largest, Some(Interference::Contended))
        .unwrap();
    let best = service.min_partition("lab.y", tight, None);
    assert!(
        best.as_ref().map_or(true, |b| b.0 != largest),
        "a refused size given: {best:?}"
    );
}

/// `kernel` imported at `isolated_ns` and `contended_ns` per launch, saved, and the contended
/// table's entry at the largest size deleted from the file: a service started on it, and that size.
fn with_a_contended_hole(
    dir: &std::path::Path,
    kernel: &str,
    (isolated_ns, contended_ns): (f64, f64),
) -> (Service, u32) {
    let imported = [
        (Interference::Isolated, isolated_ns),
        (Interference::Contended, contended_ns),
    ];
    with_a_hole_in(dir, kernel, &imported, Interference::Contended)
}

/// `kernel` imported for each (tag, time per launch) of `imported`, saved, and the `hole` table's
/// entry at the largest size deleted from the file: a service started on it, and that size.
fn with_a_hole_in(
    dir: &std::path::Path,
    kernel: &str,
    imported: &[(Interference, f64)],
    hole: Interference,
) -> (Service, u32) {
    let service = short_campaign_service(dir);
    let jitter = |i: u32| 1.0 + 0.01 * f64::from(i * 37 % 200) / 200.0;
    for &(tag, ns) in imported {
        import_and_wait(&service, kernel, tag, |_, i| (ns * jitter(i)) as u64);
    }
    let largest = *service.device().partition_sizes.last().unwrap();
    let path = Store::open(dir)
        .unwrap()
        .path_for(&service.device().fingerprint);
    drop(service);
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    // The isolated tables are the file's `kernels`, as they were before contended ones.
    let tables = match hole {
        Interference::Isolated => "kernels",
        Interference::Contended => "contended",
    };
    let entries = v[tables][kernel]["table"]["entries"]
        .as_array_mut()
        .unwrap();
    assert_eq!(entries.pop().unwrap()["sms"], largest);
    v.as_object_mut().unwrap().remove("checksum");
    std::fs::write(&path, v.to_string()).unwrap();
    (short_campaign_service(dir), largest)
}

/// Where the untagged bound is refused for a tag's missing entry, admission refuses too: it
/// took the missing tag for one never calibrated and admitted a set on the isolated bound, a
/// third of the contended one a size below (a review found it).
#[test]
fn admission_refuses_where_a_tag_has_no_entry() {
    use crate::admission::{self, Policy, Task};
    let dir = tempfile::tempdir().unwrap();
    let (service, m) = with_a_contended_hole(dir.path(), "lab.h", (100_000.0, 300_000.0));
    let isolated = service
        .bound("lab.h", m, Some(Interference::Isolated))
        .unwrap();
    let task = Task {
        name: "t".into(),
        kernels: vec!["lab.h".into()],
        sms: m,
        period_ns: 1_000_000_000,
        deadline_ns: isolated * 2,
    };
    let pinned = crate::admission_bus::ServiceAt::now(service.clone());
    for verdict in [
        admission::check_distinct(&pinned, std::slice::from_ref(&task), Policy::default()),
        admission::check_shared(&pinned, std::slice::from_ref(&task), Policy::default()),
    ] {
        assert!(
            matches!(&verdict, Err(ServiceError::NotCalibrated(why)) if why.contains("no contended bound at")),
            "{verdict:?}"
        );
    }
}

/// A report at a size where the untagged bound is refused for a tag's missing entry is judged
/// against the largest tagged bound served there: judged against nothing, an overrun was not
/// counted, signalled or recalibrated for (a review found it).
#[test]
fn a_report_where_a_tag_has_no_entry_is_judged_against_the_largest_tagged_bound() {
    let dir = tempfile::tempdir().unwrap();
    let (service, m) = with_a_contended_hole(dir.path(), "lab.r", (300_000.0, 100_000.0));
    for tag in [None, Some(Interference::Contended)] {
        // The first report raises the isolated floor, which the second is judged against.
        let isolated = service
            .bound("lab.r", m, Some(Interference::Isolated))
            .unwrap();
        let out = service.report("lab.r", m, tag, &[isolated * 2]).unwrap();
        assert_eq!((out.overruns, out.bound_ns), (1, isolated), "{tag:?}");
        // Shown in the current epoch, under a bound raised to it: filed under the isolated
        // calibration it was judged against, a contended time was counted in a past epoch at
        // once, under a bound below it, and its kernel left out of `OverrunKernels`.
        let seen = service.observed("lab.r", m, tag).unwrap();
        let shown = (seen.count, seen.overruns, seen.overruns_total, seen.max_ns);
        assert_eq!(shown, (1, 1, 1, isolated * 2), "{tag:?}: {seen:?}");
        assert_eq!(seen.bound_ns, isolated * 2, "{tag:?}: {seen:?}");
        assert_eq!(service.overrun_kernels(), ["lab.r"], "{tag:?}");
        // The time raised what it was judged against: the same time again overruns nothing.
        let again = service.report("lab.r", m, tag, &[isolated * 2]).unwrap();
        assert_eq!(again.overruns, 0, "{tag:?}");
    }
}

/// A time reported during a job at a size where its tag's table has no entry is judged, when
/// the job publishes, as a report there is (untagged, against the largest tagged bound): judged
/// against its tag's table alone, it was never carried, its epoch went past and its kernel left
/// `OverrunKernels`, while the same time untagged was carried (a review found it). Both holes,
/// each with a job of the other tag, and the untagged time as the control.
#[test]
fn a_time_reported_during_a_job_at_a_tags_hole_is_carried_as_untagged() {
    let holes = [
        (Interference::Contended, Interference::Isolated),
        (Interference::Isolated, Interference::Contended),
    ];
    for (hole, job) in holes {
        for tag in [None, Some(hole)] {
            let dir = tempfile::tempdir().unwrap();
            let imported = [(job, 300_000.0), (hole, 100_000.0)];
            let (service, m) = with_a_hole_in(dir.path(), "lab.c", &imported, hole);
            let before = service.bound("lab.c", m, Some(job)).unwrap();
            // The job's start (the import below starts it again, which changes nothing).
            monitor::recalibration_started(&service.inner, &["lab.c".to_string()]);
            let time = before / 2;
            assert_eq!(
                service.report("lab.c", m, tag, &[time]).unwrap().overruns,
                0
            );
            import_and_wait(&service, "lab.c", job, |_, i| {
                50_000 + u64::from(i % 7) * 70
            });
            let snap = service.snapshot();
            let after = service.inner.calibrated_at(&snap.tables(job)["lab.c"], m);
            assert!(
                after.is_some_and(|b| b < time),
                "the test needs a bound below the time"
            );
            let seen = service.observed("lab.c", m, tag).unwrap();
            let shown = (seen.count, seen.overruns, seen.carried);
            assert_eq!(shown, (1, 1, 1), "{hole} hole, {tag:?}: {seen:?}");
            assert_eq!(service.overrun_kernels(), ["lab.c"], "{hole} hole, {tag:?}");
        }
    }
}

/// A report at a size where no table of the kernel has an entry is judged against no bound,
/// and shown in the current epoch: it was counted in a past one at once (`count` 0), since only
/// a kernel with no calibration at all was taken to judge against none (a black-box run found it).
#[test]
fn a_report_where_no_table_has_an_entry_is_shown_in_the_current_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let imported = [(Interference::Isolated, 100_000.0)];
    let (service, m) = with_a_hole_in(dir.path(), "lab.n", &imported, Interference::Isolated);
    let out = service.report("lab.n", m, None, &[999_999]).unwrap();
    assert_eq!((out.overruns, out.bound_ns), (0, 0));
    let seen = service.observed("lab.n", m, None).unwrap();
    let shown = (seen.count, seen.max_ns, seen.floor_ns, seen.past_epochs);
    assert_eq!(shown, (1, 999_999, 999_999, 0), "{seen:?}");
    assert_eq!(seen.bound_ns, 0, "no bound is served there: {seen:?}");
}

/// A contended bound is never below an isolated launch measured at its size, nor, where the
/// contended calibration says the kernel is never faster on fewer SMs, at a larger size:
/// contended samples imported from elsewhere (10 µs) served a contended bound a quarter of the
/// isolated launches the daemon had (a black-box review found it), though a reported isolated
/// time already held it up.
#[test]
fn a_contended_bound_is_never_below_an_isolated_launch_measured_at_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let service = short_campaign_service(dir.path());
    let jitter = |i: u32| 1.0 + 0.03 * f64::from(i * 37 % 200) / 200.0;
    // Slower again on many SMs (a shape some kernels have): isolated launches at the largest
    // sizes are above those of middle ones.
    import_and_wait(&service, "lab.y", Interference::Isolated, |m, i| {
        let m = f64::from(m);
        ((1e6 / m + 400.0 * m) * jitter(i)) as u64
    });
    import_and_wait(&service, "lab.y", Interference::Contended, |_, i| {
        (10_000.0 * jitter(i)) as u64
    });
    let snap = service.snapshot();
    assert!(
        snap.tables(Interference::Contended)["lab.y"].table.monotone,
        "the test needs a contended calibration never faster on fewer SMs"
    );
    let sizes = service.device().partition_sizes.clone();
    let measured: Vec<u64> = sizes
        .iter()
        .map(|&m| {
            let info = service.bound_info("lab.y", m, Some(Interference::Isolated));
            info.unwrap().entry.observed_max_ns
        })
        .collect();
    for (k, &m) in sizes.iter().enumerate() {
        let at_or_above = *measured[k..].iter().max().unwrap();
        assert!(at_or_above > 40_000, "{m} SMs: isolated launches measured");
        let contended = service
            .bound_info("lab.y", m, Some(Interference::Contended))
            .unwrap();
        assert!(
            contended.entry.bound_ns >= at_or_above,
            "{m} SMs: contended {} below an isolated launch of {at_or_above}",
            contended.entry.bound_ns
        );
        assert!(
            contended
                .notes
                .iter()
                .any(|n| n.contains("largest isolated launch")),
            "{:?}",
            contended.notes
        );
        let served = service.bound("lab.y", m, Some(Interference::Contended));
        assert_eq!(served.unwrap(), contended.entry.bound_ns, "{m} SMs");
        let untagged = service.bound("lab.y", m, None).unwrap();
        assert!(
            untagged >= contended.entry.bound_ns,
            "{m} SMs: GetBound {untagged} below the contended bound {}",
            contended.entry.bound_ns
        );
    }
}

/// A contended time reported while a calibration of the kernel was measured is judged, at its
/// publication, against the contended bound as served: raised to the isolated launches measured
/// at its size. Judged against the contended calibration alone (a review found it), a time
/// below the bound served was carried as an overrun of a bound never served, and the kernel
/// listed in `OverrunKernels`.
#[test]
fn a_contended_time_carried_into_a_publication_is_judged_as_served() {
    const K: &str = "lab.z";
    const SMS: u32 = 64;
    let dir = tempfile::tempdir().unwrap();
    let service = short_campaign_service(dir.path());
    let jitter = |i: u32| 1.0 + 0.03 * f64::from(i * 37 % 200) / 200.0;
    import_and_wait(&service, K, Interference::Isolated, |m, i| {
        ((1e6 / f64::from(m) + 30_000.0) * jitter(i)) as u64
    });
    import_and_wait(&service, K, Interference::Contended, |_, i| {
        (10_000.0 * jitter(i)) as u64
    });
    let contended = |tag| service.bound(K, SMS, tag).unwrap();
    let served = contended(Some(Interference::Contended));
    let snap = service.snapshot();
    let cal = snap.tables(Interference::Contended).get(K).unwrap();
    let calibrated = cal.table.entry(SMS).unwrap().bound_ns;
    assert!(
        calibrated < served,
        "the test needs the isolated launches to raise it"
    );
    let time = (calibrated + served) / 2;

    monitor::recalibration_started(&service.inner, &[K.to_string()]);
    let live = service
        .report(K, SMS, Some(Interference::Contended), &[time])
        .unwrap();
    assert_eq!(live.overruns, 0, "below the bound served");
    // The job publishes (here, the same calibration again) and ends.
    monitor::publish(
        &service.inner,
        snap.clone(),
        &[(Interference::Contended, K.to_string())],
    );
    monitor::recalibration_ended(&service.inner, &[K.to_string()]);

    let observed = service
        .observed(K, SMS, Some(Interference::Contended))
        .unwrap();
    assert_eq!(
        (observed.overruns, observed.carried),
        (0, 0),
        "{observed:?}"
    );
    assert!(service.overrun_kernels().is_empty());
    assert_eq!(contended(Some(Interference::Contended)), served);
}

/// A time reported without a tag (filed as isolated) above the contended bound holds the
/// contended bound up too: contended launches are never faster than isolated ones, and the
/// scheduler did not say which condition it ran under.
#[test]
fn an_untagged_time_above_the_contended_bound_raises_it() {
    let dir = tempfile::tempdir().unwrap();
    let service = srad_calibrated(dir.path());
    untagged_time_raises_every_tag(&service);
}

/// A calibration file whose bounds are below launches it records was not written by this
/// daemon: it is moved aside whole, nothing of it is served, and `Health` says so.
#[test]
fn a_calibration_file_below_its_own_launches_is_moved_aside() {
    let dir = tempfile::tempdir().unwrap();
    let calibrated = srad_calibrated(dir.path());
    let path = Store::open(dir.path())
        .unwrap()
        .path_for(&calibrated.device().fingerprint);
    drop(calibrated);
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    for e in v["kernels"]["srad"]["table"]["entries"]
        .as_array_mut()
        .unwrap()
    {
        e["bound_ns"] = 1000.into();
    }
    // Edited, so no longer what its checksum says: read as a hand edit.
    v.as_object_mut().unwrap().remove("checksum");
    std::fs::write(&path, v.to_string()).unwrap();
    let config = ServiceConfig {
        initial_calibration: false,
        ..ServiceConfig::default()
    };
    let gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
    let service = Service::start(Box::new(gpu), Store::open(dir.path()).unwrap(), config).0;
    for tag in [
        None,
        Some(Interference::Isolated),
        Some(Interference::Contended),
    ] {
        let served = service.bound("srad", 64, tag);
        assert!(
            matches!(served, Err(ServiceError::NotCalibrated(_))),
            "{tag:?}: {served:?}"
        );
    }
    let health = service.health();
    assert!(
        health.starts_with("degraded: damaged files set aside at start")
            && health.contains("srad (isolated) at 8 SMs: bound 1000 ns below a launch"),
        "{health}"
    );
    assert!(!path.exists());
}

/// A damaged file is named in the set-aside notices before it is moved: a crash between the
/// rename and the notice (the start's next steps) left a file set aside that no start named,
/// and `Health` said `ok` (a hunt hit that window in 7 of 50 kills early in a start). The store's
/// load is the rename; nothing after it runs here, as if the process died there.
#[test]
fn a_damaged_calibration_is_noted_before_it_is_moved_aside() {
    let dir = tempfile::tempdir().unwrap();
    let calibrated = srad_calibrated(dir.path());
    let fingerprint = calibrated.device().fingerprint.clone();
    let path = Store::open(dir.path()).unwrap().path_for(&fingerprint);
    drop(calibrated);
    std::fs::write(&path, "{ damaged").unwrap();
    assert!(Store::open(dir.path())
        .unwrap()
        .load(&fingerprint)
        .is_none());
    assert!(!path.exists(), "moved aside");
    let config = ServiceConfig {
        initial_calibration: false,
        ..ServiceConfig::default()
    };
    for start in 0..2 {
        let gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
        let service = Service::start(
            Box::new(gpu),
            Store::open(dir.path()).unwrap(),
            config.clone(),
        )
        .0;
        let health = service.health();
        assert!(
            health.starts_with("degraded: damaged files set aside at start")
                && health.contains(&format!("{} (", path.display())),
            "start {start}: {health}"
        );
    }
}

/// A kernel known only from imports goes with a damaged calibration file: a query for it says
/// so and how to get it back, not that no such kernel exists (a hunt found it).
#[test]
fn a_kernel_gone_with_a_damaged_file_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let service = short_campaign_service(dir.path());
    import_and_wait(&service, "lab.z", Interference::Isolated, |_, i| {
        10_000 + u64::from(i)
    });
    assert!(service.bound("lab.z", 64, None).is_ok());
    let path = Store::open(dir.path())
        .unwrap()
        .path_for(&service.device().fingerprint);
    drop(service);
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    v["kernels"]["lab.z"]["table"]["process_shift"] = (-1.0).into();
    // Edited, so no longer what its checksum says: read as a hand edit.
    v.as_object_mut().unwrap().remove("checksum");
    std::fs::write(&path, v.to_string()).unwrap();
    // Named so by the start that set the file aside, and by the next (it said "no kernel
    // named" until the last hunt found it): both before any job has succeeded.
    for start in ["setting it aside", "the next"] {
        let service = short_campaign_service(dir.path());
        let err = service.bound("lab.z", 64, None).unwrap_err();
        assert!(
            matches!(&err, ServiceError::UnknownKernel(why)
                if why.contains("the calibration file that held its bounds was damaged and set aside")
                    && why.contains(&path.display().to_string())
                    && why.contains("`wcetctl import`")),
            "{start}: {err}"
        );
        let other = service.bound("lab.nothing", 64, None).unwrap_err();
        assert!(other.to_string().starts_with("no kernel named"), "{other}");
    }
}

/// A damaged record of kernels that lost the device is named until a job succeeds, across
/// restarts, as every file set aside is: a restart said `ok` (a hunt found it).
#[test]
fn a_damaged_device_loss_record_is_named_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = ServiceConfig {
        initial_calibration: false,
        ..short_campaigns()
    };
    let start = || {
        let gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
        Service::start(
            Box::new(gpu),
            Store::open(dir.path()).unwrap(),
            config.clone(),
        )
        .0
    };
    let uuid = crate::fnv::fnv1a_hex(start().device().fingerprint.uuid.as_bytes());
    let record = dir.path().join(format!("device-lost-{uuid}.json"));
    std::fs::write(&record, "{ damaged").unwrap();
    for run in 0..2 {
        let health = start().health();
        assert!(
            health.contains("record of kernels that lost the device: "),
            "run {run}: {health}"
        );
    }
    let service = start();
    let mut events = service.subscribe();
    let job = service.recalibrate(&["srad".to_string()]).unwrap();
    while !service.job(job).unwrap().state.finished() {
        let _ = events.blocking_recv();
    }
    drop(service);
    let health = start().health();
    assert!(!health.contains("lost the device"), "{health}");
}

/// The untagged bound is the larger of the tags' bounds as served, clock scaling included:
/// a contended calibration made at a lower clock is stretched less, so the larger one before
/// scaling need not be the larger one after.
#[test]
fn the_untagged_bound_is_the_larger_after_clock_scaling() {
    let dir = tempfile::tempdir().unwrap();
    // As if the contended campaign had run while the card was held at 1500 MHz.
    srad_calibrated_then_edited(dir.path(), |v| {
        v["contended"]["srad"]["campaign"]["environment"]["sm_clock_mhz_max"] = 1500.into();
    });
    let config = ServiceConfig {
        initial_calibration: false,
        ..ServiceConfig::default()
    };
    let slow = SimOptions {
        clock_mhz_override: Some(1000),
        ..SimOptions::default()
    };
    let gpu = SimGpu::new(DeviceProfile::h200(), slow);
    let service = Service::start(Box::new(gpu), Store::open(dir.path()).unwrap(), config).0;
    assert_eq!(service.current_clock_mhz(), Some(1000), "read at start");
    for &m in &service.device().partition_sizes {
        let untagged = service.bound("srad", m, None).unwrap();
        for tag in [Interference::Isolated, Interference::Contended] {
            let tagged = service.bound("srad", m, Some(tag)).unwrap();
            assert!(
                untagged >= tagged,
                "{m} SMs: untagged {untagged} < {tag} {tagged}"
            );
        }
    }
}

/// A time reported from production holds the bound up as the SM clock falls, stretched as the
/// calibrated bound is: a launch seen at the calibrated clock takes up to calibrated/current as
/// long now. Served unscaled, a time reported at 1980 MHz held srad's bound at that time with the
/// clock at 990, and admission accepted a task that could take twice as long (a black-box review).
#[test]
fn a_reported_time_is_stretched_to_a_slower_clock_as_the_bound_is() {
    let dir = tempfile::tempdir().unwrap();
    let service = srad_calibrated(dir.path());
    let nominal = service.current_clock_mhz().unwrap();
    let seen = 3 * service.bound("srad", 32, None).unwrap();
    let overrun = service.report("srad", 32, None, &[seen]).unwrap();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(
            service.observations_saved(
                overrun
                    .save_generation
                    .expect("an overrun is saved before it is answered"),
                std::time::Duration::from_secs(10),
            ),
        )
        .unwrap();
    drop(service);

    let config = ServiceConfig {
        initial_calibration: false,
        ..ServiceConfig::default()
    };
    let half = SimOptions {
        clock_mhz_override: Some(nominal / 2),
        ..SimOptions::default()
    };
    let gpu = SimGpu::new(DeviceProfile::h200(), half);
    let service = Service::start(Box::new(gpu), Store::open(dir.path()).unwrap(), config).0;
    let stretched = (seen * u64::from(nominal)).div_ceil(u64::from(nominal / 2));
    for tag in [
        None,
        Some(Interference::Isolated),
        Some(Interference::Contended),
    ] {
        let info = service.bound_info("srad", 32, tag).unwrap();
        assert!(
            info.entry.bound_ns >= stretched,
            "{tag:?}: {} below {seen} ns stretched to {stretched}",
            info.entry.bound_ns
        );
        assert_eq!(service.bound("srad", 32, tag).unwrap(), info.entry.bound_ns);
        let floor = info.observed.expect("the reported time holds it up");
        assert_eq!((floor.reported_ns, floor.floor_ns), (seen, stretched));
        assert!(
            info.notes.iter().any(|n| n.contains(&format!(
                "{seen} ns as reported, scaled by {nominal}/{} MHz",
                nominal / 2
            ))),
            "{:?}",
            info.notes
        );
    }
    // The smaller sizes this monotone kernel's floor carries down to are held up alike.
    assert!(service.bound("srad", 8, None).unwrap() >= stretched);
}

/// A floor carried to a new configuration of the card (served stale there) keeps the fastest
/// clock its series was reported at: reported at 2600 MHz over a calibration made at 1300, it is
/// stretched from 2600 at a 1300 MHz clock under the new configuration as under the old. Carried
/// without it, the bound halved across the change (a review found it).
#[test]
fn a_floor_carried_to_a_new_configuration_keeps_its_clock() {
    let dir = tempfile::tempdir().unwrap();
    let at = |profile: DeviceProfile, mhz: u32, initial_calibration: bool| {
        let clocked = SimOptions {
            clock_mhz_override: Some(mhz),
            ..SimOptions::default()
        };
        let config = ServiceConfig {
            initial_calibration,
            ..short_campaigns()
        };
        let gpu = SimGpu::new(profile, clocked);
        Service::start(Box::new(gpu), Store::open(dir.path()).unwrap(), config).0
    };
    let slow = at(DeviceProfile::h200(), 1300, false);
    let mut events = slow.subscribe();
    let job = slow.recalibrate(&["srad".to_string()]).unwrap();
    while !slow.job(job).unwrap().state.finished() {
        let _ = events.blocking_recv();
    }
    let seen = 2 * slow.bound("srad", 32, None).unwrap();
    drop(slow);
    let fast = at(DeviceProfile::h200(), 2600, false);
    let overrun = fast.report("srad", 32, None, &[seen]).unwrap();
    let saved = overrun
        .save_generation
        .expect("an overrun is saved before it is answered");
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(fast.observations_saved(saved, std::time::Duration::from_secs(10)))
        .unwrap();
    drop(fast);
    // Under its own configuration at 1300 MHz: served stretched from 2600, and exported
    // stretched from 2600 to the calibrated clock, where the exported table holds (an export
    // carried it as reported, and an importer at 1300 served it stretched from that clock only).
    let same = at(DeviceProfile::h200(), 1300, false);
    assert!(same.bound("srad", 32, None).unwrap() >= 2 * seen);
    let calibrated = same
        .bound_info("srad", 32, None)
        .unwrap()
        .clock
        .calibrated_mhz;
    assert!(calibrated < 2600);
    let at_calibrated = stretch(seen, 2600, calibrated);
    let bundle = same.export_calibration(&["srad".to_string()]).unwrap();
    for e in &bundle.calibrations {
        let exported = e.calibration.table.entry(32).unwrap().bound_ns;
        assert!(
            exported >= at_calibrated,
            "{}: {exported} < {at_calibrated}",
            e.interference
        );
    }
    drop(same);
    let mut reconfigured = DeviceProfile::h200();
    reconfigured.sm_clock_mhz -= 100;
    let after = at(reconfigured, 1300, false);
    let info = after.bound_info("srad", 32, None).unwrap();
    assert!(info.stale, "served from the old configuration");
    assert!(
        info.entry.bound_ns >= 2 * seen,
        "{} < 2 x {seen}",
        info.entry.bound_ns
    );
}

/// A time reported at a size the device does not realise at one start (the placement probe
/// refused it) is kept, and holds the bounds up again once the size is realised: treated as
/// damage and moved to the size below, it was lost for good, and the size's bound came back below
/// a time reported there (a review found it). Meanwhile it holds up the size below.
#[test]
fn a_time_reported_at_a_size_refused_at_a_later_start_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let service = srad_calibrated(dir.path());
    let seen = 3 * service.bound("srad", 24, None).unwrap();
    let overrun = service.report("srad", 24, None, &[seen]).unwrap();
    let saved = overrun
        .save_generation
        .expect("an overrun is saved before it is answered");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let limit = std::time::Duration::from_secs(10);
    runtime
        .block_on(service.observations_saved(saved, limit))
        .unwrap();
    drop(service);
    let start = |step: u32| {
        let mut profile = DeviceProfile::h200();
        profile.partition_step_sms = step;
        let gpu = SimGpu::new(profile, SimOptions::default());
        let config = ServiceConfig {
            initial_calibration: false,
            ..ServiceConfig::default()
        };
        Service::start(Box::new(gpu), Store::open(dir.path()).unwrap(), config).0
    };
    let refused = start(16);
    assert!(!refused.device().partition_sizes.contains(&24));
    // Listed once, at the size it is held at (it made a second row of 16 SMs).
    let listed: Vec<u32> = refused
        .list_observed()
        .iter()
        .map(|o| o.partition_sms)
        .collect();
    assert_eq!(listed, [16]);
    assert!(
        refused.bound("srad", 16, None).unwrap() >= seen,
        "held below"
    );
    // A save while the size is refused keeps the series.
    refused.report("srad", 16, None, &[1]).unwrap();
    assert!(refused.save_observations().is_none());
    drop(refused);
    let realised = start(8);
    let info = realised.bound_info("srad", 24, None).unwrap();
    assert!(
        info.entry.bound_ns >= seen,
        "{} < {seen}",
        info.entry.bound_ns
    );
    assert_eq!(info.observed.map(|f| f.sms), Some(24));
}

/// A time below the bound is saved before it is answered only where the next calibration
/// stands on it: bounds that are current wait for the periodic save, stale ones (which a
/// recalibration will replace) do not; a time that raises no floor never waits.
#[test]
fn a_floor_under_bounds_due_for_recalibration_is_saved_before_it_is_answered() {
    let current = tempfile::tempdir().unwrap();
    let service = srad_calibrated(current.path());
    let bound = service.bound("srad", 32, None).unwrap();
    let outcome = service.report("srad", 32, None, &[bound / 2]).unwrap();
    assert!(outcome.save_generation.is_none(), "current bounds");
    let journalled = outcome.journal_seq.expect("journalled instead");
    let outcome = service.report("srad", 32, None, &[bound / 3]).unwrap();
    assert!(
        outcome.journal_seq.is_none_or(|s| s == journalled),
        "no floor raised: it waits at most for the floor above it on its way to disk"
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime
        .block_on(service.floors_journalled(journalled, std::time::Duration::from_secs(10)))
        .unwrap();
    let outcome = service.report("srad", 32, None, &[bound / 4]).unwrap();
    assert_eq!((outcome.save_generation, outcome.journal_seq), (None, None));
    drop(service);

    let stale = tempfile::tempdir().unwrap();
    srad_calibrated_then_edited(stale.path(), |v| {
        v["kernels"]["srad"]["code"] = "other code".into();
    });
    let config = ServiceConfig {
        initial_calibration: false,
        ..ServiceConfig::default()
    };
    let gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
    let service = Service::start(Box::new(gpu), Store::open(stale.path()).unwrap(), config).0;
    assert!(service.bound_info("srad", 32, None).unwrap().stale);
    let bound = service.bound("srad", 32, None).unwrap();
    let outcome = service.report("srad", 32, None, &[bound / 2]).unwrap();
    let raised = outcome.save_generation.expect("stale bounds");
    let outcome = service.report("srad", 32, None, &[bound / 3]).unwrap();
    assert_eq!(
        outcome.save_generation, None,
        "no floor raised: it waits for no save, only for the floor above it on its way"
    );
    runtime
        .block_on(service.observations_saved(raised, std::time::Duration::from_secs(10)))
        .unwrap();
    let outcome = service.report("srad", 32, None, &[bound / 4]).unwrap();
    assert_eq!(
        (outcome.save_generation, outcome.journal_seq),
        (None, None),
        "nothing on its way"
    );
}

/// A floor raised after the save at shutdown (a report still in flight while the daemon
/// stops) is journalled all the same, and the next start reads it. A journal that cannot be
/// written (here a directory stands in its place) costs a save instead, not an error.
#[test]
fn floors_are_journalled_after_the_last_save_and_a_broken_journal_costs_a_save() {
    let wait = std::time::Duration::from_secs(10);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let service = srad_calibrated(dir.path());
    let file = crate::observe::ObservationFile::new(dir.path(), &service.device().fingerprint);
    let bound = service.bound("srad", 32, None).unwrap();
    service.save_observations();
    let outcome = service.report("srad", 32, None, &[bound / 2]).unwrap();
    let seq = outcome
        .journal_seq
        .expect("a floor below the bound is journalled");
    runtime
        .block_on(service.floors_journalled(seq, wait))
        .unwrap();
    drop(service);
    let floor = |obs: &crate::observe::ReportedTimes| {
        obs.kernel("srad").unwrap()[&(32, Interference::Isolated)].floor_ns
    };
    assert_eq!(floor(&file.load().0), bound / 2);

    let journal = file.journal_paths().0;
    std::fs::remove_file(&journal).unwrap();
    std::fs::create_dir(&journal).unwrap();
    let config = ServiceConfig {
        initial_calibration: false,
        ..short_campaigns()
    };
    let gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
    let service = Service::start(Box::new(gpu), Store::open(dir.path()).unwrap(), config).0;
    let outcome = service.report("srad", 32, None, &[bound * 2 / 3]).unwrap();
    let seq = outcome.journal_seq.expect("journalled");
    runtime
        .block_on(service.floors_journalled(seq, wait))
        .expect("saved instead");
    drop(service);
    assert_eq!(floor(&file.load().0), bound * 2 / 3);
}

/// A service with [`short_campaigns`] whose state has `kernel` calibrated under both tags,
/// paced (500 µs a launch) so that a job is still measuring when a test reports times.
fn calibrated_then_paced(state: &std::path::Path, kernel: &str) -> Service {
    {
        let first = short_campaign_service(state);
        let mut events = first.subscribe();
        let job = first.recalibrate(&[kernel.to_string()]).unwrap();
        while !first.job(job).unwrap().state.finished() {
            let _ = events.blocking_recv();
        }
    }
    let paced = SimOptions {
        pace_us_per_launch: 500,
        ..SimOptions::default()
    };
    let gpu = SimGpu::new(DeviceProfile::h200(), paced);
    Service::start(
        Box::new(gpu),
        Store::open(state).unwrap(),
        short_campaigns(),
    )
    .0
}

/// A time reported before a kernel had any bound is judged by its first calibration, as one
/// reported while it was measured: above the first bound, an overrun, counted, listed and
/// signalled once (it used to raise the bound through its floor and be counted nowhere).
#[test]
fn a_time_reported_before_any_bound_is_judged_by_the_first_calibration() {
    const K: &str = "backprop";
    let dir = tempfile::tempdir().unwrap();
    let service = short_campaign_service(dir.path());
    let mut signals = service.subscribe_monitor();
    let outcome = service.report(K, 64, None, &[300_000_000]).unwrap();
    assert_eq!(outcome.overruns, 0, "no bound yet");
    let below = service
        .report(K, 32, Some(Interference::Contended), &[1])
        .unwrap();
    assert_eq!(below.overruns, 0);
    let mut events = service.subscribe();
    let job = service.recalibrate(&[K.to_string()]).unwrap();
    while !service.job(job).unwrap().state.finished() {
        let _ = events.blocking_recv();
    }
    assert_eq!(service.job(job).unwrap().state, JobState::Done);
    let mut exceeded = 0;
    while let Ok(event) = signals.try_recv() {
        exceeded += usize::from(matches!(event, MonitorEvent::BoundExceeded { .. }));
    }
    assert_eq!(exceeded, 1);
    let seen = service.observed(K, 64, None).unwrap();
    assert_eq!((seen.count, seen.overruns, seen.carried), (1, 1, 1));
    let fast = service
        .observed(K, 32, Some(Interference::Contended))
        .unwrap();
    assert_eq!(
        (fast.overruns, fast.carried),
        (0, 0),
        "below its bound: not carried"
    );
    assert_eq!(service.overrun_kernels(), vec![K.to_string()]);
}

/// A tagged time whose tag has no calibration is judged, when the job that was running
/// publishes, as a report of it is judged: as untagged. (With isolated calibrations alone, a
/// contended time reported during the first calibration was counted nowhere.)
#[test]
fn a_time_of_an_uncalibrated_tag_is_judged_as_untagged_at_publication() {
    const K: &str = "backprop";
    let dir = tempfile::tempdir().unwrap();
    let paced = SimOptions {
        pace_us_per_launch: 500,
        ..SimOptions::default()
    };
    let gpu = SimGpu::new(DeviceProfile::h200(), paced);
    let mut config = short_campaigns();
    config.interference = vec![Interference::Isolated];
    let service = Service::start(Box::new(gpu), Store::open(dir.path()).unwrap(), config).0;
    let mut events = service.subscribe();
    let job = service.recalibrate(&[K.to_string()]).unwrap();
    while !matches!(events.blocking_recv(), Ok(Event::JobProgress { job: j, .. }) if j == job) {}
    let contended = Some(Interference::Contended);
    assert_eq!(
        service
            .report(K, 64, contended, &[300_000_000])
            .unwrap()
            .overruns,
        0
    );
    while !service.job(job).unwrap().state.finished() {
        let _ = events.blocking_recv();
    }
    assert_eq!(service.job(job).unwrap().state, JobState::Done);
    let seen = service.observed(K, 64, contended).unwrap();
    assert_eq!((seen.overruns, seen.carried), (1, 1));
    assert_eq!(service.overrun_kernels(), vec![K.to_string()]);
}

/// A time reported during a kernel's first calibration, above what it publishes, is one
/// report: signalled once, when the first interference is published, not again when the
/// second is (an untagged time is judged against the larger of the tags' bounds, which only
/// grows; a black-box run got two `BoundExceeded` for one report). backprop's contended bounds
/// are above its isolated ones, which is when the second publication judged it again.
#[test]
fn a_time_carried_into_a_first_calibration_is_signalled_once() {
    const K: &str = "backprop";
    let dir = tempfile::tempdir().unwrap();
    let paced = SimOptions {
        pace_us_per_launch: 500,
        ..SimOptions::default()
    };
    let gpu = SimGpu::new(DeviceProfile::h200(), paced);
    let service = Service::start(
        Box::new(gpu),
        Store::open(dir.path()).unwrap(),
        short_campaigns(),
    )
    .0;
    let mut events = service.subscribe();
    let mut signals = service.subscribe_monitor();
    let job = service.recalibrate(&[K.to_string()]).unwrap();
    while !matches!(events.blocking_recv(), Ok(Event::JobProgress { job: j, .. }) if j == job) {}
    let outcome = service.report(K, 64, None, &[300_000_000]).unwrap();
    assert_eq!(outcome.overruns, 0, "no bound yet");
    while !service.job(job).unwrap().state.finished() {
        let _ = events.blocking_recv();
    }
    assert_eq!(service.job(job).unwrap().state, JobState::Done);
    let mut exceeded = 0;
    while let Ok(event) = signals.try_recv() {
        exceeded += usize::from(matches!(event, MonitorEvent::BoundExceeded { .. }));
    }
    assert_eq!(exceeded, 1);
    let seen = service.observed(K, 64, None).unwrap();
    assert_eq!((seen.overruns, seen.carried), (1, 1));
    // Carried into the epoch the next untagged report is judged in, which keeps it.
    assert_eq!(service.report(K, 64, None, &[1]).unwrap().overruns, 0);
    let after = service.observed(K, 64, None).unwrap();
    assert_eq!((after.overruns, after.carried), (1, 1));
    assert_eq!(service.overrun_kernels(), vec![K.to_string()]);
}

/// An untagged time carried in by a recalibration of both tags is filed under the
/// calibration an untagged report is judged against (here the contended one, the larger), so
/// the next untagged report keeps its epoch: the overrun stays counted and listed. (A black-box
/// run saw it filed under the isolated one and dropped by the next report.)
#[test]
fn a_carried_untagged_time_stays_in_the_epoch_untagged_reports_are_judged_in() {
    const K: &str = "backprop";
    let dir = tempfile::tempdir().unwrap();
    let service = calibrated_then_paced(dir.path(), K);
    let bound = service.bound(K, 64, None).unwrap();
    let mut events = service.subscribe();
    let job = service.recalibrate(&[K.to_string()]).unwrap();
    while !matches!(events.blocking_recv(), Ok(Event::JobProgress { job: j, .. }) if j == job) {}
    let slow = 3 * bound;
    assert_eq!(service.report(K, 64, None, &[slow]).unwrap().overruns, 1);
    while !service.job(job).unwrap().state.finished() {
        let _ = events.blocking_recv();
    }
    assert_eq!(service.job(job).unwrap().state, JobState::Done);
    let carried = service.observed(K, 64, None).unwrap();
    assert_eq!((carried.overruns, carried.carried), (1, 1));
    assert_eq!(carried.overruns_total, 1);
    assert_eq!(
        service.report(K, 64, None, &[bound / 2]).unwrap().overruns,
        0
    );
    let after = service.observed(K, 64, None).unwrap();
    assert_eq!((after.count, after.overruns, after.carried), (2, 1, 1));
    assert_eq!(after.calibration, carried.calibration);
    assert_eq!(service.overrun_kernels(), vec![K.to_string()]);
}

/// A time reported while a recalibration runs is filed in the epoch of the bound it was
/// judged against, which the publication ends. Above the bound that recalibration then
/// publishes, it is judged again and carried into the new epoch: the kernel stays among the
/// overrun kernels (it left them at the publication before) and `GetObserved` counts it. An
/// untagged time is judged as `GetBound` serves, against the larger of the two tags' bounds:
/// one between a new isolated bound and the contended bound is not carried.
#[test]
fn a_time_reported_during_a_recalibration_is_judged_against_what_it_publishes() {
    // Contended launches of backprop are slower than isolated ones: its contended bounds
    // are the larger, which untagged times are judged against.
    const K: &str = "backprop";
    let dir = tempfile::tempdir().unwrap();
    let service = calibrated_then_paced(dir.path(), K);
    let isolated = |m| service.bound_info(K, m, Some(Interference::Isolated));
    let before = isolated(32).unwrap();
    let contended64 = service.bound(K, 64, Some(Interference::Contended)).unwrap();
    let mut events = service.subscribe();
    let job = service
        .recalibrate_with(&[K.to_string()], &[Interference::Isolated])
        .unwrap();
    while !matches!(events.blocking_recv(), Ok(Event::JobProgress { job: j, .. }) if j == job) {}
    let slow = 3 * before.entry.bound_ns;
    let tagged = service
        .report(K, 32, Some(Interference::Isolated), &[slow])
        .unwrap();
    assert_eq!(tagged.overruns, 1);
    // At a larger size, whose floor does not hold up the bound at 32 SMs.
    let below_contended = contended64 - 1;
    let untagged = service.report(K, 64, None, &[below_contended]).unwrap();
    assert_eq!(untagged.overruns, 0);
    while !service.job(job).unwrap().state.finished() {
        let _ = events.blocking_recv();
    }
    assert_eq!(service.job(job).unwrap().state, JobState::Done);
    let after = isolated(32).unwrap();
    assert_ne!(after.calibration_id, before.calibration_id, "published");
    assert_eq!(after.entry.bound_ns, slow, "held up by the floor");
    assert_eq!(service.overrun_kernels(), vec![K.to_string()]);
    let at32 = service
        .observed(K, 32, Some(Interference::Isolated))
        .unwrap();
    assert_eq!((at32.count, at32.overruns, at32.carried), (1, 1, 1));
    assert_eq!(
        (at32.calibration, at32.max_ns),
        (after.calibration_id, slow)
    );
    assert_eq!(at32.overruns_total, 1, "counted once");
    // Above the new isolated bound (which its floor holds up), not above the contended one
    // GetBound serves: not carried.
    let isolated64 = isolated(64).unwrap();
    assert!(
        isolated64
            .observed
            .is_some_and(|f| f.raised && f.floor_ns == below_contended),
        "{isolated64:?}"
    );
    let at64 = service.observed(K, 64, None).unwrap();
    assert_eq!((at64.overruns, at64.carried), (0, 0));
}

/// Untagged, a bound answers for both conditions: it is stale when either calibration is,
/// even where the current one's bound is the larger and is the one served.
/// An unknown name is quoted to 64 characters: a 100,000-character one came back whole.
#[test]
fn an_unknown_name_is_quoted_shortened() {
    let dir = tempfile::tempdir().unwrap();
    let service = short_campaign_service(dir.path());
    let long = "é".repeat(100_000);
    let e = service.bound(&long, 64, None).unwrap_err().to_string();
    assert!(
        e.len() < 2_000 && e.contains("(100000 characters)"),
        "{}",
        &e[..200]
    );
    let e = service.bound("nope", 64, None).unwrap_err().to_string();
    assert!(e.contains("`nope`"), "{e}");
}

/// At a size the sweep verified, the sweep's contended launches are the ones the stressor ran
/// beside: `stressor_sms` names it there as at a measured size (it said 0, "isolated").
#[test]
fn a_verified_size_names_the_stressor_its_launches_ran_beside() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = short_campaigns();
    // Too little time to measure every size: the sweep verifies the others.
    config.recipe.sweep.budget_s = 1e-6;
    let service = srad_calibrated_with(config, dir.path());
    let mut verified = 0;
    for &m in &service.device().partition_sizes {
        let info = service
            .bound_info("srad", m, Some(Interference::Contended))
            .unwrap();
        if info.entry.samples == 0 && info.entry.verified_samples > 0 {
            verified += 1;
            assert!(info.guarantee.stressor_sms > 0, "{m} SMs: {info:?}");
        }
    }
    assert!(verified > 0, "the sweep verified no size");
}

#[test]
fn the_untagged_bound_is_stale_when_either_calibration_is() {
    let dir = tempfile::tempdir().unwrap();
    // The isolated calibration timed other code than the catalogue has now.
    srad_calibrated_then_edited(dir.path(), |v| {
        v["kernels"]["srad"]["code"] = "other code".into();
    });
    let config = ServiceConfig {
        initial_calibration: false,
        ..ServiceConfig::default()
    };
    let gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
    let service = Service::start(Box::new(gpu), Store::open(dir.path()).unwrap(), config).0;
    let m = service.device().partition_sizes[0];
    let isolated = service
        .bound_info("srad", m, Some(Interference::Isolated))
        .unwrap();
    let contended = service
        .bound_info("srad", m, Some(Interference::Contended))
        .unwrap();
    assert!(isolated.stale && !contended.stale);
    assert!(
        contended.entry.bound_ns > isolated.entry.bound_ns,
        "contended is served"
    );
    let untagged = service.bound_info("srad", m, None).unwrap();
    assert_eq!(untagged.interference, Interference::Contended);
    assert!(untagged.stale, "{:?}", untagged.notes);
    assert!(untagged
        .notes
        .iter()
        .any(|n| n.contains("the isolated calibration")));
}

/// With several devices, Health's commands name the device (`wcetctl --gpu N`): a plain
/// `wcetctl` acts on the default one. A daemon of one device keeps the plain command
/// ([`health_advises_recalibration_only_for_kernels_it_can_run`]).
#[test]
fn health_on_one_of_several_devices_names_it_in_its_commands() {
    let dir = tempfile::tempdir().unwrap();
    drop(srad_calibrated(dir.path()));
    // Another clock policy: srad's bounds are stale, and Health says how to recalibrate them.
    let mut reclocked = DeviceProfile::h200();
    reclocked.sm_clock_mhz -= 100;
    let config = ServiceConfig {
        gpu: 1,
        devices_served: 2,
        ..short_campaigns()
    };
    let gpu = SimGpu::new(reclocked, SimOptions::default());
    let after = Service::start(Box::new(gpu), Store::open(dir.path()).unwrap(), config).0;
    let health = after.health();
    assert!(
        health.contains("recalibrate: `wcetctl --gpu 1 recalibrate srad`"),
        "{health}"
    );
}

/// Health names each stale kernel with the command that makes it current: a kernel known
/// only from imported samples has nothing to run here, so it is not put in a recalibrate
/// command (which would refuse the whole list).
#[test]
fn health_advises_recalibration_only_for_kernels_it_can_run() {
    let dir = tempfile::tempdir().unwrap();
    let before = srad_calibrated(dir.path());
    let sizes = before.device().partition_sizes.clone();
    let samples: Vec<(u32, u64)> = sizes
        .iter()
        .flat_map(|&m| (0..200u64).map(move |i| (m, 1_000_000 / u64::from(m) + 5_000 + i)))
        .collect();
    let mut events = before.subscribe();
    let job = before
        .import_samples("lab.k", &samples, ImportOptions::default())
        .unwrap();
    while !before.job(job).unwrap().state.finished() {
        let _ = events.blocking_recv();
    }
    assert_eq!(before.job(job).unwrap().state, JobState::Done);
    let imported = before.bound("lab.k", 64, None).unwrap();
    drop(before);
    let mut reclocked = DeviceProfile::h200();
    reclocked.sm_clock_mhz -= 100;
    // Paced, so that a job started below is still running when Health is read.
    let paced = SimOptions {
        pace_us_per_launch: 500,
        ..SimOptions::default()
    };
    let gpu = SimGpu::new(reclocked, paced);
    let after = Service::start(
        Box::new(gpu),
        Store::open(dir.path()).unwrap(),
        short_campaigns(),
    )
    .0;
    let health = after.health();
    assert!(
        health.contains("stale bounds for srad (")
            && health.contains("recalibrate: `wcetctl recalibrate srad`"),
        "{health}"
    );
    assert!(
        health.contains("stale bounds for lab.k (samples or a calibration imported"),
        "{health}"
    );
    // Asked for by name, it is refused as an argument (it is known: not `UnknownKernel`).
    let refused = after.recalibrate(&["lab.k".to_string()]);
    assert!(
        matches!(&refused, Err(ServiceError::InvalidArgs(why)) if why.contains("nothing to run here")),
        "{refused:?}"
    );
    // Imported samples read no clock: the stale import is scaled from the clock its
    // fingerprint names, as a measured calibration is.
    let info = after.bound_info("lab.k", 64, None).unwrap();
    let nominal = DeviceProfile::h200().sm_clock_mhz;
    assert!(info.clock.scaled, "{:?}", info.clock);
    assert_eq!(info.clock.calibrated_mhz, nominal);
    assert!(
        info.entry.bound_ns > imported,
        "{} <= {imported}",
        info.entry.bound_ns
    );
    assert_eq!(clock_in_policy("nominal:1980MHz"), Some(1980));
    assert_eq!(clock_in_policy("locked:1755MHz"), Some(1755));
    assert_eq!(clock_in_policy("default"), None);
    // Being recalibrated: Health names the job, not a command to run again.
    let job = after.recalibrate(&["srad".to_string()]).unwrap();
    let health = after.health();
    assert!(
        health.contains(&format!(
            "stale bounds being recalibrated: srad (job {job})"
        )) && !health.contains("`wcetctl recalibrate srad`"),
        "{health}"
    );
    // Admission reads the same from the bound (`Remedy::BeingRecalibrated`).
    let info = after.bound_info("srad", 64, None).unwrap();
    assert_eq!(info.recalibrating, Some(job));
    after.cancel_job(job).unwrap();
}

/// Times reported on this card under an intermediate configuration B hold the bounds served
/// stale after the next change up, whatever became of B's calibration file: damaged (left
/// where it is and named in Health), unreadable, or never written (no job ended under B).
#[test]
fn floors_of_an_intermediate_configuration_hold_up_the_stale_bounds() {
    for case in [
        "damaged",
        "unreadable",
        "never written",
        "observations damaged",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let clocked = |minus: u32| {
            let mut profile = DeviceProfile::h200();
            profile.sm_clock_mhz -= minus;
            let gpu = SimGpu::new(profile, SimOptions::default());
            Service::start(
                Box::new(gpu),
                Store::open(dir.path()).unwrap(),
                short_campaigns(),
            )
            .0
        };
        drop(srad_calibrated(dir.path()));
        let second = clocked(100);
        // Without a job under B, A's calibration is the one served stale at C.
        if case != "never written" && case != "observations damaged" {
            let mut events = second.subscribe();
            let job = second.recalibrate(&["srad".to_string()]).unwrap();
            while !second.job(job).unwrap().state.finished() {
                let _ = events.blocking_recv();
            }
        }
        let seen = second
            .bound("srad", 32, Some(Interference::Isolated))
            .unwrap()
            * 4;
        second.report("srad", 32, None, &[seen]).unwrap();
        second.save_observations();
        let b_file = Store::open(dir.path())
            .unwrap()
            .path_for(&second.device().fingerprint);
        let b_observed =
            crate::observe::ObservationFile::new(dir.path(), &second.device().fingerprint);
        drop(second);
        match case {
            "damaged" => std::fs::write(&b_file, "{").unwrap(),
            // Not even the card it was for can be read: it is read anyway, and what it held
            // is named as unread rather than dropped in silence.
            "observations damaged" => std::fs::write(b_observed.path(), "{").unwrap(),
            "unreadable" => {
                std::fs::remove_file(&b_file).unwrap();
                std::fs::create_dir(&b_file).unwrap();
            }
            _ => assert!(!b_file.exists()),
        }

        let third = clocked(200);
        let info = third
            .bound_info("srad", 32, Some(Interference::Isolated))
            .unwrap();
        assert!(info.stale, "{case}");
        if case == "observations damaged" {
            let notes = info.notes.join("; ");
            assert!(
                notes.contains("could not all be read")
                    && notes.contains(&b_observed.path().display().to_string()),
                "{notes}"
            );
            continue;
        }
        assert!(
            info.entry.bound_ns >= seen,
            "{case}: {} < {seen}",
            info.entry.bound_ns
        );
        // As reported; served stretched from the clock it ran at to this configuration's.
        let floor = info.observed.expect("the floor is named");
        assert_eq!(floor.reported_ns, seen, "{case}");
        assert!(floor.floor_ns >= seen && info.entry.bound_ns >= floor.floor_ns);
        let health = third.health();
        let named = health.contains("not usable, so not served stale")
            && health.contains(&b_file.display().to_string());
        assert_eq!(named, case != "never written", "{case}: {health}");
        if case == "damaged" {
            assert_eq!(std::fs::read(&b_file).unwrap(), b"{");
        }
    }
}

/// An inherited floor that the table does not carry (the carried-over table lacked its size,
/// so raising it there did nothing) and a lower time reported here: the bound is the higher
/// floor, not the table's entry (which is below both).
#[test]
fn an_inherited_floor_outside_the_table_and_a_reported_one_both_hold_the_bound_up() {
    let dir = tempfile::tempdir().unwrap();
    let table_bound = std::cell::Cell::new(0u64);
    srad_calibrated_then_edited(dir.path(), |v| {
        let srad = &mut v["kernels"]["srad"];
        let entries = srad["table"]["entries"].as_array().unwrap();
        let at_32 = entries.iter().find(|e| e["sms"] == 32).unwrap();
        table_bound.set(at_32["bound_ns"].as_u64().unwrap());
        srad["inherited_floors"] = serde_json::json!([
            {"sms": 32, "ns": table_bound.get() * 3, "at": "2026-11-01T00:00:00Z"}
        ]);
    });
    let service = short_campaign_service(dir.path());
    let tag = Some(Interference::Isolated);
    let reported = table_bound.get() * 2;
    service.report("srad", 32, tag, &[reported]).unwrap();
    let info = service.bound_info("srad", 32, tag).unwrap();
    assert_eq!(info.entry.bound_ns, table_bound.get() * 3);
    assert_eq!(
        info.observed.map(|f| f.floor_ns),
        Some(table_bound.get() * 3)
    );
    assert_eq!(
        service.bound("srad", 32, tag).unwrap(),
        table_bound.get() * 3
    );
}

/// Another card's calibration is served stale on a card without one, unless the daemon serves
/// that card too: then it is that card's own, and serving it here mixed two GPUs' bounds and
/// reports (a black-box hunt found it, where api.md says they never mix).
#[test]
fn a_sibling_cards_calibration_is_not_served_on_another() {
    let dir = tempfile::tempdir().unwrap();
    let sibling = SimOptions {
        device_index: 1,
        ..SimOptions::default()
    };
    let gpu = SimGpu::new(DeviceProfile::h200(), sibling.clone());
    let uuid = gpu.info().fingerprint.uuid.clone();
    let calibrated = Service::start(
        Box::new(gpu),
        Store::open(dir.path()).unwrap(),
        short_campaigns(),
    )
    .0;
    let mut events = calibrated.subscribe();
    let job = calibrated.recalibrate(&["srad".to_string()]).unwrap();
    while !calibrated.job(job).unwrap().state.finished() {
        let _ = events.blocking_recv();
    }
    drop(calibrated);
    let start = |siblings: Vec<String>| {
        let gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
        let config = ServiceConfig {
            sibling_cards: siblings,
            devices_served: 2,
            ..short_campaigns()
        };
        Service::start(Box::new(gpu), Store::open(dir.path()).unwrap(), config).0
    };
    // A card replaced (the other is not served): its calibration, stale.
    assert!(
        start(Vec::new())
            .bound_info("srad", 32, None)
            .unwrap()
            .stale
    );
    // A card served beside it: nothing of it.
    let beside = start(vec![uuid]).bound("srad", 32, None);
    assert!(
        matches!(beside, Err(ServiceError::NotCalibrated(_))),
        "{beside:?}"
    );
}

/// After a clock-policy change, this card's previous calibration is served stale (not a newer
/// one of another card), still at least every time production reported under it.
#[test]
fn a_stale_calibration_keeps_the_floors_reported_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let before = srad_calibrated(dir.path());
    let seen = before.bound("srad", 32, None).unwrap() * 3;
    before.report("srad", 32, None, &[seen]).unwrap();
    before.save_observations();
    drop(before);
    // A newer calibration of another card in the same directory.
    let config = short_campaigns();
    let other_card = SimOptions {
        device_index: 1,
        ..SimOptions::default()
    };
    let gpu = SimGpu::new(DeviceProfile::h200(), other_card);
    let other = Service::start(
        Box::new(gpu),
        Store::open(dir.path()).unwrap(),
        config.clone(),
    )
    .0;
    let mut events = other.subscribe();
    let job = other.recalibrate(&["srad".to_string()]).unwrap();
    while !other.job(job).unwrap().state.finished() {
        let _ = events.blocking_recv();
    }
    drop(other);

    let mut reclocked = DeviceProfile::h200();
    reclocked.sm_clock_mhz -= 100;
    let gpu = SimGpu::new(reclocked, SimOptions::default());
    let after = Service::start(Box::new(gpu), Store::open(dir.path()).unwrap(), config).0;
    for tag in [
        None,
        Some(Interference::Isolated),
        Some(Interference::Contended),
    ] {
        let info = after.bound_info("srad", 32, tag).unwrap();
        assert!(info.stale);
        assert!(
            info.entry.bound_ns >= seen,
            "{tag:?}: {} < {seen}",
            info.entry.bound_ns
        );
        let notes = info.notes.join("; ");
        assert!(
            notes.contains("this card's calibration under another configuration"),
            "{notes}"
        );
        // GetBoundInfo's `observed_floor_ns` names the floor that holds the bound up.
        // As reported; served stretched by the clock the card lost with its configuration.
        let floor = info.observed.expect("the inherited floor is named");
        assert_eq!((floor.reported_ns, floor.sms), (seen, 32), "{tag:?}");
        assert_eq!(floor.floor_ns, stretch(seen, 1980, 1880), "{tag:?}");
        assert_eq!(
            floor.raised,
            info.entry.bound_ns == floor.floor_ns,
            "{tag:?}"
        );
    }
    let at_8 = after.bound_info("srad", 8, None).unwrap();
    assert_eq!(
        at_8.observed.map(|f| (f.reported_ns, f.sms)),
        Some((seen, 32))
    );
    // A job saves the snapshot under this fingerprint, the stale srad with it: after a
    // restart the floor is still named.
    let mut events = after.subscribe();
    let job = after.recalibrate(&["needle".to_string()]).unwrap();
    while !after.job(job).unwrap().state.finished() {
        let _ = events.blocking_recv();
    }
    let mut reclocked = DeviceProfile::h200();
    reclocked.sm_clock_mhz -= 100;
    drop(after);
    let after = short_campaign_service_on(reclocked, dir.path());
    let again = after.bound_info("srad", 32, None).unwrap();
    assert!(again.stale);
    assert_eq!(again.observed.map(|f| f.reported_ns), Some(seen));
    let smaller = after
        .bound("srad", 8, Some(Interference::Isolated))
        .unwrap();
    assert!(
        smaller >= seen,
        "srad never gets faster on fewer SMs: {smaller} < {seen}"
    );
}

/// With contended calibrated first, an untagged time still holds up the isolated bound, the
/// one admission uses for a task alone on the GPU.
#[test]
fn an_untagged_time_raises_the_isolated_bound_whatever_is_calibrated_first() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = short_campaigns();
    config.interference = vec![Interference::Contended, Interference::Isolated];
    let service = srad_calibrated_with(config, dir.path());
    untagged_time_raises_every_tag(&service);
}

fn untagged_time_raises_every_tag(service: &Service) {
    let contended = |m| {
        service
            .bound("srad", m, Some(Interference::Contended))
            .unwrap()
    };
    let seen = contended(32).max(service.bound("srad", 32, None).unwrap()) + 1000;
    let outcome = service.report("srad", 32, None, &[seen]).unwrap();
    assert_eq!(outcome.overruns, 1);
    assert!(outcome.save_generation.is_some());
    assert!(contended(32) >= seen, "{} < {seen}", contended(32));
    let isolated = service
        .bound("srad", 32, Some(Interference::Isolated))
        .unwrap();
    assert!(isolated >= seen);
}

/// An untagged bound held up by a contended time says so: the bound's calibration is the
/// isolated one, the number is the contended report's (a black-box run found the answer
/// naming only the isolated calibration).
#[test]
fn a_floor_from_the_other_interference_names_its_series() {
    let dir = tempfile::tempdir().unwrap();
    let service = srad_calibrated(dir.path());
    let untagged = service.bound_info("srad", 32, None).unwrap();
    let seen = untagged.entry.bound_ns * 3;
    service
        .report("srad", 32, Some(Interference::Contended), &[seen])
        .unwrap();
    let info = service.bound_info("srad", 32, None).unwrap();
    assert_eq!(info.entry.bound_ns, seen);
    let floor = info.observed.unwrap();
    assert!(floor.raised);
    assert_eq!(floor.tag, Some(Interference::Contended));
    assert!(
        info.notes
            .iter()
            .any(|n| n.contains("reported from production (tagged contended)")),
        "{:?}",
        info.notes
    );
}

/// `GetBound`'s lean path serves exactly `GetBoundInfo`'s bound at every size, for each tag
/// and for the safer of the two, with both tags calibrated and a production floor under one.
#[test]
fn get_bound_serves_what_get_bound_info_says() {
    let dir = tempfile::tempdir().unwrap();
    let service = srad_calibrated(dir.path());
    let at32 = service
        .bound("srad", 32, Some(Interference::Contended))
        .unwrap();
    service
        .report("srad", 32, Some(Interference::Contended), &[at32 * 3])
        .unwrap();
    let tags = [
        None,
        Some(Interference::Isolated),
        Some(Interference::Contended),
    ];
    for m in 1..=133 {
        for tag in tags {
            let lean = service.bound("srad", m, tag).map_err(|e| e.to_string());
            let full = service
                .bound_info("srad", m, tag)
                .map(|i| i.entry.bound_ns)
                .map_err(|e| e.to_string());
            assert_eq!(
                lean.is_ok(),
                full.is_ok(),
                "{m} SMs, {tag:?}: {lean:?} {full:?}"
            );
            if let (Ok(a), Ok(b)) = (lean, full) {
                assert_eq!(a, b, "{m} SMs, {tag:?}");
            }
        }
    }
    assert_eq!(service.bound("srad", 32, None).unwrap(), at32 * 3);
}

#[test]
fn an_error_names_twenty_kernels_and_says_how_many_more() {
    let few: Vec<String> = (0..3).map(|i| format!("k{i}")).collect();
    assert_eq!(names_in_a_message(&few, "wcetctl"), "k0, k1, k2");
    let many: Vec<String> = (0..300).map(|i| format!("k{i}")).collect();
    let text = names_in_a_message(&many, "wcetctl");
    assert!(
        text.starts_with("k0, k1,") && text.contains("k19 and 280 more"),
        "{text}"
    );
    assert!(!text.contains("k20"), "{text}");
}

/// An export of a kernel calibrated under one tag alone carries the times of the other tag too:
/// they hold up `GetBound` here, and the exported table is the importer's `GetBound`.
#[test]
fn an_export_of_one_tag_carries_the_other_tags_times() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = short_campaigns();
    config.interference = vec![Interference::Isolated];
    let gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
    let service = Service::start(Box::new(gpu), Store::open(dir.path()).unwrap(), config).0;
    let mut events = service.subscribe();
    let job = service.recalibrate(&["srad".to_string()]).unwrap();
    while !service.job(job).unwrap().state.finished() {
        let _ = events.blocking_recv();
    }
    let late = 3 * service.bound("srad", 64, None).unwrap();
    service
        .report("srad", 64, Some(Interference::Contended), &[late])
        .unwrap();
    assert_eq!(service.bound("srad", 64, None).unwrap(), late);
    let bundle = service.export_calibration(&["srad".to_string()]).unwrap();
    let exported = &bundle.calibrations[0].calibration;
    assert_eq!(exported.table.entry(64).unwrap().bound_ns, late);
    assert!(
        exported
            .table
            .notes
            .iter()
            .any(|n| n.contains("raised when exported")),
        "{:?}",
        exported.table.notes
    );
}

/// An untagged time waits for every tag's bound before it is judged: a time reported before
/// the first calibration, between its isolated and contended bounds, is no overrun, though the
/// isolated bound is published first (it was counted, against a bound never served). The same
/// time reported as isolated is one, also across a restart: untagged and isolated reports
/// share a series, which was once read back as all untagged, so it was counted nowhere.
#[test]
fn an_untagged_time_is_judged_once_every_tag_is_published() {
    const K: &str = "backprop";
    let calibrate = |service: &Service| {
        let mut events = service.subscribe();
        let job = service.recalibrate(&[K.to_string()]).unwrap();
        while !service.job(job).unwrap().state.finished() {
            let _ = events.blocking_recv();
        }
    };
    let first = tempfile::tempdir().unwrap();
    let service = short_campaign_service(first.path());
    calibrate(&service);
    let tagged = |t| service.bound(K, 64, Some(t)).unwrap();
    let (isolated, contended) = (
        tagged(Interference::Isolated),
        tagged(Interference::Contended),
    );
    assert!(contended > isolated + 2, "the test needs a gap");
    let between = (isolated + contended) / 2;

    let second = tempfile::tempdir().unwrap();
    let service = short_campaign_service(second.path());
    service.report(K, 64, None, &[between]).unwrap();
    calibrate(&service);
    assert_eq!(service.bound(K, 64, None).unwrap(), contended.max(between));
    assert_eq!(service.observed(K, 64, None).unwrap().overruns, 0);
    assert!(service.overrun_kernels().is_empty());

    let third = tempfile::tempdir().unwrap();
    let service = short_campaign_service(third.path());
    let tag = Some(Interference::Isolated);
    service.report(K, 64, tag, &[between]).unwrap();
    assert!(service.save_observations().is_none());
    drop(service);
    let service = short_campaign_service(third.path());
    calibrate(&service);
    assert_eq!(
        service.bound(K, 64, tag).unwrap(),
        between,
        "its floor holds it up"
    );
    let seen = service.observed(K, 64, tag).unwrap();
    assert_eq!((seen.overruns, seen.carried), (1, 1));
    assert_eq!(service.overrun_kernels(), vec![K.to_string()]);
}

/// A carried overrun is saved, by itself, at once: the file holds it before any final save,
/// and after a restart it is still counted and listed (one carried by a job's second
/// publication was never saved, and a restart lost it).
#[test]
fn a_carried_overrun_survives_a_restart() {
    const K: &str = "bfs";
    let dir = tempfile::tempdir().unwrap();
    let carried = |obs: &crate::observe::ReportedTimes, sms: u32, tag: Interference| {
        obs.kernel(K).unwrap()[&(sms, tag)]
            .epochs
            .last()
            .map_or(0, |e| e.carried)
    };
    {
        let service = short_campaign_service(dir.path());
        let contended = Some(Interference::Contended);
        service.report(K, 32, contended, &[300_000_000]).unwrap();
        service.report(K, 64, None, &[300_000_000]).unwrap();
        let mut events = service.subscribe();
        let job = service.recalibrate(&[K.to_string()]).unwrap();
        while !service.job(job).unwrap().state.finished() {
            let _ = events.blocking_recv();
        }
        assert_eq!(service.overrun_kernels(), vec![K.to_string()]);
        let every_change = *service.observations_changed().borrow();
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(service.observations_saved(every_change, std::time::Duration::from_secs(10)))
            .expect("the carried times are saved without being asked");
        let file = crate::observe::ObservationFile::new(dir.path(), &service.device().fingerprint);
        let on_disk = file.load().0;
        assert_eq!(carried(&on_disk, 32, Interference::Contended), 1);
        assert_eq!(carried(&on_disk, 64, Interference::Isolated), 1);
        assert_eq!(service.save_observations(), None);
    }
    let service = short_campaign_service(dir.path());
    let tagged = service
        .observed(K, 32, Some(Interference::Contended))
        .unwrap();
    assert_eq!((tagged.overruns, tagged.carried), (1, 1));
    let untagged = service.observed(K, 64, None).unwrap();
    assert_eq!((untagged.overruns, untagged.carried), (1, 1));
    assert_eq!(service.overrun_kernels(), vec![K.to_string()]);
}

/// Carried to a new configuration as stale, a calibration of the isolated tag alone keeps the
/// contended times reported under the old one: they held up `GetBound` there (judged as
/// untagged), and were dropped when only the contended calibration could take them.
#[test]
fn a_stale_isolated_calibration_keeps_the_contended_floors() {
    let dir = tempfile::tempdir().unwrap();
    let start = |minus: u32| {
        let mut profile = DeviceProfile::h200();
        profile.sm_clock_mhz -= minus;
        let mut config = short_campaigns();
        config.interference = vec![Interference::Isolated];
        let gpu = SimGpu::new(profile, SimOptions::default());
        Service::start(Box::new(gpu), Store::open(dir.path()).unwrap(), config).0
    };
    let seen = {
        let first = start(0);
        let mut events = first.subscribe();
        let job = first.recalibrate(&["srad".to_string()]).unwrap();
        while !first.job(job).unwrap().state.finished() {
            let _ = events.blocking_recv();
        }
        let seen = 4 * first.bound("srad", 32, None).unwrap();
        let contended = Some(Interference::Contended);
        first.report("srad", 32, contended, &[seen]).unwrap();
        assert_eq!(first.bound("srad", 32, None).unwrap(), seen);
        first.save_observations();
        seen
    };
    let second = start(100);
    let info = second.bound_info("srad", 32, None).unwrap();
    assert!(info.stale, "{info:?}");
    assert!(
        info.entry.bound_ns >= seen,
        "{} below {seen}",
        info.entry.bound_ns
    );
}

/// A time waiting for every tag's bound is judged when the job ends if the job published one
/// tag only (asked for one, or cancelled or failed after the first): it was dropped, the
/// overrun counted nowhere.
#[test]
fn a_time_waiting_for_a_tag_the_job_never_published_is_judged_at_its_end() {
    const K: &str = "backprop";
    let dir = tempfile::tempdir().unwrap();
    let service = short_campaign_service(dir.path());
    service.report(K, 64, None, &[300_000_000]).unwrap();
    let mut events = service.subscribe();
    let mut signals = service.subscribe_monitor();
    let job = service
        .recalibrate_with(&[K.to_string()], &[Interference::Isolated])
        .unwrap();
    while !service.job(job).unwrap().state.finished() {
        let _ = events.blocking_recv();
    }
    assert_eq!(service.job(job).unwrap().state, JobState::Done);
    let seen = service.observed(K, 64, None).unwrap();
    assert_eq!((seen.overruns, seen.carried), (1, 1));
    assert_eq!(service.overrun_kernels(), vec![K.to_string()]);
    let mut exceeded = 0;
    while let Ok(event) = signals.try_recv() {
        exceeded += usize::from(matches!(event, MonitorEvent::BoundExceeded { .. }));
    }
    assert_eq!(exceeded, 1);
}

/// A kernel held back for losing the device is run only when named: not by a calibration of
/// every kernel (whose message says it left it out), nor by the recalibration an overrun
/// queues (which brought the restart loop back), while a kernel named runs.
#[test]
fn a_held_back_kernel_is_run_only_when_named() {
    const K: &str = "lud";
    let dir = tempfile::tempdir().unwrap();
    let start = || {
        let mut config = short_campaigns();
        config.monitor.recalibrate_on_overrun = Some(std::time::Duration::ZERO);
        let gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
        Service::start(Box::new(gpu), Store::open(dir.path()).unwrap(), config).0
    };
    let finish = |service: &Service, job: u64| {
        let mut events = service.subscribe();
        while !service.job(job).unwrap().state.finished() {
            let _ = events.blocking_recv();
        }
        service.job(job).unwrap()
    };
    let service = start();
    let bound = service.bound_info(K, 64, None).err();
    assert!(bound.is_some(), "not calibrated yet");
    let job = service.recalibrate(&[K.to_string()]).unwrap();
    assert_eq!(finish(&service, job).state, JobState::Done);
    let device = service.device().clone();
    drop(service);
    // Two losses of the device while lud ran, as earlier runs would have recorded them.
    let code = crate::kernels::builtin_suite()
        .into_iter()
        .find(|k| k.name == K)
        .unwrap()
        .code_digest();
    let loss = serde_json::json!({"kernel": K, "code": code, "why": "CUDA_ERROR_ASSERT", "at": Utc::now()});
    let uuid = crate::fnv::fnv1a_hex(device.fingerprint.uuid.as_bytes());
    std::fs::write(
        dir.path().join(format!("device-lost-{uuid}.json")),
        serde_json::json!({ "losses": [&loss, &loss] }).to_string(),
    )
    .unwrap();

    let service = start();
    assert!(service.health().contains("kernel `lud` is held back"));
    let overrun = 10 * service.bound(K, 64, None).unwrap();
    let outcome = service.report(K, 64, None, &[overrun]).unwrap();
    assert_eq!(outcome.overruns, 1);
    assert!(
        outcome.recalibration_wanted,
        "configured, so asked of the caller"
    );
    service.recalibrate_after_overrun(K);
    assert!(
        service.jobs().is_empty(),
        "no recalibration of a held kernel"
    );
    let job = service.recalibrate(&[]).unwrap();
    let every = finish(&service, job);
    assert!(
        !every.kernels.contains(&K.to_string()),
        "{:?}",
        every.kernels
    );
    assert!(
        every.message.contains("held back for losing the device")
            && every.message.ends_with(": lud"),
        "{}",
        every.message
    );
    let named = service.recalibrate(&[K.to_string()]).unwrap();
    assert_eq!(finish(&service, named).state, JobState::Done);
    assert!(
        !service.health().contains("held back"),
        "a run through clears it"
    );
}

/// Only the first loss of a process is charged: after it every call fails at once, and a job
/// still queued then would have charged an innocent kernel (a reviewer saw needle recorded
/// for app.assert's assert).
#[test]
fn only_the_kernel_running_at_the_first_loss_is_charged() {
    let dir = tempfile::tempdir().unwrap();
    let mut profile = DeviceProfile::h200();
    profile.kernels.get_mut("lud").unwrap().effects.device_fault =
        Some("CUDA_ERROR_ASSERT (710)".into());
    let service = short_campaign_service_on(profile, dir.path());
    let mut events = service.subscribe();
    let jobs = [
        service.recalibrate(&["lud".to_string()]).unwrap(),
        service.recalibrate(&["bfs".to_string()]).unwrap(),
    ];
    for job in jobs {
        while !service.job(job).unwrap().state.finished() {
            let _ = events.blocking_recv();
        }
        assert_eq!(service.job(job).unwrap().state, JobState::Failed);
    }
    let uuid = crate::fnv::fnv1a_hex(service.device().fingerprint.uuid.as_bytes());
    let record =
        std::fs::read_to_string(dir.path().join(format!("device-lost-{uuid}.json"))).unwrap();
    assert!(
        record.contains("\"lud\"") && !record.contains("\"bfs\""),
        "{record}"
    );
}

/// A kernel that ran every step of a calibration through has its losses forgotten even when
/// the job fails for another kernel (they were forgotten only when the whole job succeeded, so
/// one kernel failing alone kept every suspect one hiccup from being held back).
#[test]
fn a_kernel_that_ran_through_is_cleared_though_another_fails() {
    let dir = tempfile::tempdir().unwrap();
    let mut profile = DeviceProfile::h200();
    profile.kernels.remove("bfs");
    let gpu = SimGpu::new(profile, SimOptions::default());
    let uuid = crate::fnv::fnv1a_hex(crate::gpu::Gpu::info(&gpu).fingerprint.uuid.as_bytes());
    let record = dir.path().join(format!("device-lost-{uuid}.json"));
    let lud = crate::kernels::builtin_suite()
        .into_iter()
        .find(|k| k.name == "lud")
        .unwrap();
    let loss = serde_json::json!({"kernel": "lud", "code": lud.code_digest(), "why": "Xid 79", "at": Utc::now()});
    std::fs::write(&record, serde_json::json!({ "losses": [loss] }).to_string()).unwrap();
    let service = Service::start(
        Box::new(gpu),
        Store::open(dir.path()).unwrap(),
        short_campaigns(),
    )
    .0;
    let mut events = service.subscribe();
    let job = service.recalibrate(&["bfs".into(), "lud".into()]).unwrap();
    while !service.job(job).unwrap().state.finished() {
        let _ = events.blocking_recv();
    }
    let status = service.job(job).unwrap();
    assert_eq!(status.state, JobState::Failed, "{}", status.message);
    let left: serde_json::Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    assert_eq!(left["losses"], serde_json::json!([]), "{left}");
}

/// A kernel that a queued job names is said to wait for that job, whatever kind it is, with no
/// other advice (during an import it advised `wcetctl recalibrate`, as for a calibration).
#[test]
fn a_kernel_a_job_names_points_at_that_job_alone() {
    let dir = tempfile::tempdir().unwrap();
    let config = ServiceConfig {
        initial_calibration: false,
        ..ServiceConfig::default()
    };
    let gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
    // The worker is never started: the job stays queued.
    let (service, _worker) = Service::load(Box::new(gpu), Store::open(dir.path()).unwrap(), config);
    let job = service.recalibrate(&["srad".to_string()]).unwrap();
    let Err(ServiceError::NotCalibrated(why)) = service.bound("srad", 64, None) else {
        panic!("srad has no bounds yet");
    };
    assert!(
        why.contains(&format!("job {job} (queued or running) names it"))
            && !why.contains("get it with"),
        "{why}"
    );
}

/// A bundle exported here and imported back: a kernel known only from imported samples has
/// nothing to run, and its calibration is this device's, so the job does not call it stale (it
/// said "served stale" while it was served current).
#[test]
fn a_bundle_imported_back_on_its_own_device_is_not_called_stale() {
    let dir = tempfile::tempdir().unwrap();
    let service = short_campaign_service(dir.path());
    let wait = |job: u64| {
        let mut events = service.subscribe();
        while !service.job(job).unwrap().state.finished() {
            let _ = events.blocking_recv();
        }
        service.job(job).unwrap()
    };
    let samples: Vec<(u32, u64)> = service
        .device()
        .partition_sizes
        .iter()
        .flat_map(|&m| (0..200u64).map(move |i| (m, 1_000_000 / u64::from(m) + 20_000 + i)))
        .collect();
    let options = ImportOptions {
        geometry: None,
        interference: Interference::Isolated,
        source: "lab rig".into(),
        batch_slowdown: None,
    };
    let job = service.import_samples("lab.k", &samples, options).unwrap();
    assert_eq!(wait(job).state, JobState::Done);
    let bundle = service.export_calibration(&["lab.k".to_string()]).unwrap();
    let text = serde_json::to_string(&bundle).unwrap();
    service.import_calibration(&text, false).unwrap();
    let job = service.jobs().last().unwrap().0;
    let status = wait(job);
    assert_eq!(status.state, JobState::Done, "{}", status.message);
    assert!(
        status
            .message
            .contains("served as measured under this device's configuration")
            && !status.message.contains("stale"),
        "{}",
        status.message
    );
    assert!(!service.bound_info("lab.k", 64, None).unwrap().stale);
}

/// An admission analysis reads every kernel's isolated, contended and untagged bound from one
/// moment: a calibration committed while it runs pairs no tag's new bound with another's old
/// one, and the verdict says which calibrations it rests on.
#[test]
fn an_admission_analysis_reads_every_bound_from_one_moment() {
    use crate::admission::{self, BoundSource, Policy, Task};
    use crate::admission_bus::ServiceAt;
    let dir = tempfile::tempdir().unwrap();
    let service = srad_calibrated(dir.path());
    let id = |tag| service.bound_info("srad", 64, tag).unwrap().calibration_id;
    let before = [Interference::Isolated, Interference::Contended].map(|t| id(Some(t)));
    let pinned = ServiceAt::now(service.clone());
    let mut events = service.subscribe();
    let job = service.recalibrate(&["srad".to_string()]).unwrap();
    while !service.job(job).unwrap().state.finished() {
        let _ = events.blocking_recv();
    }
    let after = [Interference::Isolated, Interference::Contended].map(|t| id(Some(t)));
    assert_ne!(
        before, after,
        "the recalibration committed new calibrations"
    );
    for (i, tag) in [Interference::Isolated, Interference::Contended]
        .into_iter()
        .enumerate()
    {
        let b = pinned.bound("srad", 64, Some(tag)).unwrap();
        assert_eq!(b.origin.calibration, before[i], "{tag}");
    }
    let task = Task {
        name: "t".into(),
        kernels: vec!["srad".into()],
        sms: 64,
        period_ns: 1_000_000_000,
        deadline_ns: 1_000_000_000,
    };
    let verdict = admission::check_distinct(&pinned, &[task], Policy::default()).unwrap();
    assert!(!verdict.rests_on.is_empty());
    for used in &verdict.rests_on {
        assert!(before.contains(&used.origin.calibration), "{used:?}");
    }
}
