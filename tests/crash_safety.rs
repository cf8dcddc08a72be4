//! Crash safety of the daemon as a whole: SIGKILL at random instants of a recalibration never
//! leaves a kernel without bounds or with a mix of old and new ones; corrupt store files are moved
//! aside and the rest recalibrated; a device fault fails the job but keeps the old bounds served.

mod ops_support;

use ops_support::*;
use rand::{Rng, SeedableRng};
use std::time::Duration;

/// Per-launch pacing of the recalibrating daemon: 8 kernels x ~5 sizes x ~50 launches at 1 ms
/// is a few seconds, long enough to land kills before, during and after the commit.
const PACE_US: &str = "1000";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_recalibration_serves_old_or_new_never_a_mix() {
    tokio::time::timeout(Duration::from_secs(110), async {
        let fx = Fixture::new();
        let conn = fx.connect().await;
        let old = calibrate_state(&fx).await;
        // Seed 2 makes the new bounds differ from the old ones, and a fresh process runs the same
        // job the same way each time, so every round's "new" is the same curve set.
        let recal = [
            "--seed",
            "2",
            "--sim-pace-us",
            PACE_US,
            "--screen-launches",
            "50",
            "--heavy-tail-launches",
            "200",
        ];
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x6b11);
        let mut seen = Vec::new();
        for round in 0..6 {
            let mut d = Daemon::spawn(fx.address(), &fx.state(), &recal);
            wait_for_daemon(&conn, &mut d).await;
            assert!(files_containing(&fx.state(), ".tmp-").is_empty(), "round {round}: a .tmp- file survived the restart");
            seen.push(curves(&conn).await);
            let job: u64 = call(&conn, CALIBRATION, "Recalibrate", &(Vec::<String>::new(),)).await.expect("Recalibrate");
            let delay = Duration::from_millis(rng.random_range(200..2200));
            tokio::time::sleep(delay).await;
            let (state, progress, _): (String, f64, String) = call(&conn, CALIBRATION, "GetJob", &(job,)).await.expect("GetJob");
            println!("round {round}: kill -9 after {delay:?} (job {job} {state} at {:.0}%)", progress * 100.0);
            d.kill9();
        }
        // The reference "new": the same recalibration, run to completion.
        let mut d = Daemon::spawn(fx.address(), &fx.state(), &recal);
        wait_for_daemon(&conn, &mut d).await;
        assert!(files_containing(&fx.state(), ".tmp-").is_empty(), "a .tmp- file survived the last restart");
        seen.push(curves(&conn).await);
        let job: u64 = call(&conn, CALIBRATION, "Recalibrate", &(Vec::<String>::new(),)).await.expect("Recalibrate");
        let (state, message) = wait_for_job(&conn, job).await;
        assert_eq!(state, "done", "{message}");
        let new = curves(&conn).await;
        assert_ne!(old, new, "seed 2 should give different bounds, or this test proves nothing");
        d.stop();

        for (round, served) in seen.iter().enumerate() {
            assert_eq!(served.keys().collect::<Vec<_>>(), old.keys().collect::<Vec<_>>(), "round {round}: kernel list changed");
            for (kernel, curve) in served {
                let curve = curve.as_ref().unwrap_or_else(|e| panic!("round {round}: {kernel} has no bounds ({e})"));
                assert!(
                    Some(curve) == old[kernel].as_ref().ok() || Some(curve) == new[kernel].as_ref().ok(),
                    "round {round}: {kernel} serves a curve that is neither the old nor the new one"
                );
            }
            let n_new = served.iter().filter(|(k, c)| c == &&new[*k]).count();
            println!("round {round}: {n_new} of {} kernels serve the new bounds", served.len());
        }
    })
    .await
    .expect("test ran past its time limit");
}

/// A daemon paced at 1 ms a launch on `fx`'s state, running a recalibration of `kernels` (every
/// kernel when empty) that has reported progress: seconds from its end. Returns it and the job.
async fn paced_daemon_in_a_job(
    fx: &Fixture,
    conn: &zbus::Connection,
    kernels: &[&str],
) -> (Daemon, u64) {
    use futures_util::StreamExt;
    let (d, calibration, mut progress) = paced_daemon_with_progress(fx, conn).await;
    let job = calibration.recalibrate(kernels).await.expect("Recalibrate");
    while let Some(signal) = progress.next().await {
        if signal.args().expect("JobProgress args").job == job {
            break;
        }
    }
    (d, job)
}

/// A daemon paced at 1 ms a launch on `fx`'s state, on the bus, with a subscription to its
/// jobs' progress taken before any job starts.
async fn paced_daemon_with_progress(
    fx: &Fixture,
    conn: &zbus::Connection,
) -> (
    Daemon,
    wcetd::client::CalibrationProxy<'static>,
    wcetd::client::JobProgressStream,
) {
    let mut d = Daemon::spawn(fx.address(), &fx.state(), &["--sim-pace-us", PACE_US]);
    wait_for_daemon(conn, &mut d).await;
    let calibration = wcetd::client::CalibrationProxy::new(conn)
        .await
        .expect("proxy");
    let progress = calibration
        .receive_job_progress()
        .await
        .expect("JobProgress");
    (d, calibration, progress)
}

/// SIGTERM while a recalibration runs: the job is cancelled and ends before the process exits
/// (its end is in the log, and `stop` fails if the signal killed the process), no temporary file
/// is left, and the next start serves the bounds of before.
/// `JobFinished` signals on the default device's object (it is served at two paths, each
/// signalling: one is heard), from `sender` when given.
async fn job_finished(
    conn: &zbus::Connection,
    sender: Option<&'static str>,
) -> zbus::MessageStream {
    let mut rule = zbus::MatchRule::builder().msg_type(zbus::message::Type::Signal);
    if let Some(sender) = sender {
        rule = rule.sender(sender);
    }
    let rule = rule
        .path(wcetd::bus::OBJECT_PATH)
        .interface(CALIBRATION)
        .member("JobFinished")
        .build()
        .expect("match rule");
    zbus::MessageStream::for_match_rule(rule, conn, None)
        .await
        .expect("match rule")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_recalibration_cancels_the_job_and_exits_cleanly() {
    tokio::time::timeout(Duration::from_secs(90), async {
        let fx = Fixture::new();
        let conn = fx.connect().await;
        let old = calibrate_state(&fx).await;
        let (mut d, job) = paced_daemon_in_a_job(&fx, &conn, &[]).await;
        // A job still queued at a clean stop ends with it too: nothing to name at the next start.
        let queued: u64 = call(&conn, CALIBRATION, "Recalibrate", &(vec!["lud"],))
            .await
            .expect("Recalibrate");
        // From the daemon's name, as a client's proxy hears it: not once the name is gone.
        let mut finished = job_finished(&conn, Some(wcetd::bus::BUS_NAME)).await;
        d.stop();
        // Both announced before the daemon left the bus, while clients could still hear it
        // (they had heard only its name go).
        let mut heard = Vec::new();
        while heard.len() < 2 {
            use futures_util::StreamExt;
            let msg = tokio::time::timeout(Duration::from_secs(5), finished.next())
                .await
                .expect("JobFinished for the jobs the stop cancelled")
                .expect("stream open")
                .expect("signal");
            let (id, state, _): (u64, String, String) = msg.body().deserialize().unwrap();
            assert_eq!(state, "cancelled");
            heard.push(id);
        }
        // The queued job ends at once, the running one at its next batch.
        heard.sort_unstable();
        assert_eq!(heard, [job, queued]);
        let log = d.log_text();
        assert!(
            log.contains(&format!("job finished job={job} state=\"cancelled\"")),
            "the job did not end before the process did:\n{log}"
        );
        assert!(
            files_containing(&fx.state(), ".tmp-").is_empty(),
            "a .tmp- file was left"
        );
        let mut d = Daemon::spawn(fx.address(), &fx.state(), &[]);
        wait_for_daemon(&conn, &mut d).await;
        assert_eq!(curves(&conn).await, old, "the bounds of before are served");
        assert_eq!(
            health(&conn).await,
            "ok",
            "a job cancelled at a clean stop ended"
        );
        d.stop();
    })
    .await
    .expect("test ran past its time limit");
}

/// A process killed during a job cannot end it: at the next start `Health` names the job and
/// its kernels (their bounds are those of before, safe but not what the operator asked for),
/// until a job succeeds; the record of the running job does not outlive it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_the_previous_run_did_not_finish_is_named_in_health() {
    tokio::time::timeout(Duration::from_secs(90), async {
        let fx = Fixture::new();
        let conn = fx.connect().await;
        let old = calibrate_state(&fx).await;
        let (mut d, _) = paced_daemon_in_a_job(&fx, &conn, &["srad", "bfs"]).await;
        // Queued behind it: lost with the process too, and named (a black-box run found only
        // the running job named).
        let queued: u64 = call(&conn, CALIBRATION, "Recalibrate", &(vec!["lud"],))
            .await
            .expect("Recalibrate");
        d.kill9();
        let mut d = Daemon::spawn(fx.address(), &fx.state(), &[]);
        wait_for_daemon(&conn, &mut d).await;
        assert_eq!(curves(&conn).await, old, "the bounds of before are served");
        let said = health(&conn).await;
        assert!(
            said.starts_with("degraded: an earlier run ended during job")
                && said.contains("calibrating srad, bfs, started")
                && said.contains(&format!("before job {queued} of pid "))
                && said.contains("(calibrating lud, queued")
                && said.contains("`wcetctl recalibrate bfs lud srad`"),
            "{said}"
        );
        assert!(
            d.log_text().contains("an earlier run ended during job"),
            "logged as a warning"
        );
        // A restart without a job does not forget it.
        d.stop();
        let mut d = Daemon::spawn(fx.address(), &fx.state(), &[]);
        wait_for_daemon(&conn, &mut d).await;
        assert_eq!(health(&conn).await, said);
        let job: u64 = call(&conn, CALIBRATION, "Recalibrate", &(vec!["srad"],))
            .await
            .expect("Recalibrate");
        assert_eq!(wait_for_job(&conn, job).await.0, "done");
        assert_eq!(health(&conn).await, "ok");
        assert!(files_containing(&fx.state(), "job-running").is_empty());
        d.stop();
    })
    .await
    .expect("test ran past its time limit");
}

async fn corrupt_store_is_quarantined(damage: fn(&[u8]) -> Vec<u8>, what: &str) {
    let fx = Fixture::new();
    let conn = fx.connect().await;
    let before = calibrate_state(&fx).await;
    let files = files_containing(&fx.state(), "calibration-");
    assert_eq!(files.len(), 1, "{files:?}");
    let path = fx.state().join(&files[0]);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, damage(&bytes)).unwrap();

    let mut d = Daemon::spawn(fx.address(), &fx.state(), &[]);
    wait_for_daemon(&conn, &mut d).await;
    let (state, message) = wait_for_job(&conn, 1).await;
    assert_eq!(
        state, "done",
        "{what}: recalibration after quarantine: {message}"
    );
    let after = curves(&conn).await;
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>()
    );
    assert!(
        after.values().all(Result::is_ok),
        "{what}: every kernel served again: {after:?}"
    );
    let aside = files_containing(&fx.state(), ".corrupt-");
    assert_eq!(
        aside.len(),
        1,
        "{what}: the bad file is kept aside: {:?}",
        files_containing(&fx.state(), "")
    );
    assert_eq!(
        std::fs::read(fx.state().join(&aside[0])).unwrap(),
        damage(&bytes),
        "{what}: kept as it was"
    );
    let log = d.log_text();
    assert!(
        log.contains("calibration file is corrupt; moved aside") && log.contains(&aside[0]),
        "{what}: the log names the problem and where the file went:\n{log}"
    );
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_store_file_is_moved_aside_and_recalibrated() {
    tokio::time::timeout(
        Duration::from_secs(60),
        corrupt_store_is_quarantined(|b| b[..b.len() / 2].to_vec(), "truncated"),
    )
    .await
    .expect("test ran past its time limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbled_store_file_is_moved_aside_and_recalibrated() {
    let garble = |b: &[u8]| {
        let mut g = b.to_vec();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for _ in 0..64 {
            let i = rng.random_range(0..g.len());
            g[i] = rng.random();
        }
        g
    };
    tokio::time::timeout(
        Duration::from_secs(60),
        corrupt_store_is_quarantined(garble, "garbled"),
    )
    .await
    .expect("test ran past its time limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_fault_fails_the_job_keeps_old_bounds_and_degrades_health() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let fx = Fixture::new();
        let conn = fx.connect().await;
        let old = calibrate_state(&fx).await;
        let mut d = Daemon::spawn(
            fx.address(),
            &fx.state(),
            &["--seed", "3", "--sim-fault-after", "300"],
        );
        wait_for_daemon(&conn, &mut d).await;
        assert_eq!(health(&conn).await, "ok");
        // Subscribe before starting the job so the signal cannot be missed.
        let mut finished = job_finished(&conn, None).await;
        let job: u64 = call(&conn, CALIBRATION, "Recalibrate", &(Vec::<String>::new(),))
            .await
            .expect("Recalibrate");
        use futures_util::StreamExt;
        let (state, message) = loop {
            let msg = finished
                .next()
                .await
                .expect("signal stream ended")
                .expect("signal");
            let (j, state, message): (u64, String, String) =
                msg.body().deserialize().expect("JobFinished body");
            if j == job {
                break (state, message);
            }
        };
        assert_eq!(state, "failed", "{message}");
        assert!(
            message.contains("fault") && message.contains("bounds unchanged"),
            "{message}"
        );
        assert_eq!(
            curves(&conn).await,
            old,
            "the old bounds are still served after a failed job"
        );
        let h = health(&conn).await;
        assert!(h.starts_with("degraded"), "Health after a failed job: {h}");
        d.stop();
    })
    .await
    .expect("test ran past its time limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_the_process_cannot_recover_from_exits_for_a_restart_and_keeps_the_bounds() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let fx = Fixture::new();
        let conn = fx.connect().await;
        let old = calibrate_state(&fx).await;
        let mut d = Daemon::spawn(
            fx.address(),
            &fx.state(),
            &[
                "--seed",
                "3",
                "--sim-fault-after",
                "300",
                "--sim-fault-lost",
            ],
        );
        wait_for_daemon(&conn, &mut d).await;
        let job: u64 = call(&conn, CALIBRATION, "Recalibrate", &(Vec::<String>::new(),))
            .await
            .expect("Recalibrate");
        // The job fails and the daemon exits with failure, so that systemd restarts it.
        let status = tokio::task::spawn_blocking(move || {
            let status = d.child.wait().expect("waiting for wcetd");
            (status, d)
        });
        let (status, d) = status.await.expect("join");
        assert!(
            !status.success(),
            "a lost device must end the process with failure"
        );
        let log = d.log_text();
        assert!(log.contains("device lost"), "{log}");
        assert!(log.contains(&format!("job={job}")), "{log}");
        // A fresh daemon on the same state serves the stored bounds again.
        let mut again = Daemon::spawn(fx.address(), &fx.state(), &["--seed", "3"]);
        wait_for_daemon(&conn, &mut again).await;
        assert_eq!(
            curves(&conn).await,
            old,
            "the stored bounds survive the restart"
        );
        again.stop();
    })
    .await
    .expect("test ran past its time limit");
}

/// `wcetctl recalibrate` waits for its job to end; when the daemon dies under it (here SIGKILL),
/// it says the job is lost and exits with a failure instead of waiting forever (a black-box run
/// found it still waiting after the daemon had restarted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wcetctl_stops_waiting_when_the_daemon_dies_under_its_job() {
    use futures_util::StreamExt;
    tokio::time::timeout(Duration::from_secs(90), async {
        let fx = Fixture::new();
        let conn = fx.connect().await;
        calibrate_state(&fx).await;
        let (mut d, _calibration, mut progress) = paced_daemon_with_progress(&fx, &conn).await;
        let waiting = std::process::Command::new(env!("CARGO_BIN_EXE_wcetctl"))
            .args(["--bus-address", fx.address(), "recalibrate", "lud"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("running wcetctl");
        // Its job is running, so it is waiting on it.
        progress.next().await.expect("a job's progress");
        d.kill9();
        let out = tokio::task::spawn_blocking(move || waiting.wait_with_output())
            .await
            .unwrap()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(
            stderr.contains("the daemon left the bus while job 1 ran"),
            "{stderr}"
        );
    })
    .await
    .expect("test ran past its time limit");
}

/// An upgrade that configures a larger process shift than the stored calibration allowed for (on
/// a real GPU: bounds stored before the shift existed) serves every bound raised by the
/// difference from the first answer and says so in `GetBoundInfo`; with no job since, the file
/// still holds the bounds as fitted, which a start without the flag serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounds_stored_without_the_process_shift_are_raised_at_start() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let fx = Fixture::new();
        let conn = fx.connect().await;
        let old = calibrate_state(&fx).await;
        let mut d = Daemon::spawn(fx.address(), &fx.state(), &["--process-shift", "0.02"]);
        wait_for_daemon(&conn, &mut d).await;
        let raised = curves(&conn).await;
        for (kernel, curve) in &old {
            let (before, after) = (curve.as_ref().unwrap(), raised[kernel].as_ref().unwrap());
            for (&(m, b), &(m2, a)) in before.iter().zip(after) {
                assert_eq!(m, m2);
                let least = b as f64 * 1.02;
                assert!(
                    a as f64 >= least && a as f64 <= least + 1.0,
                    "{kernel} at {m} SMs: {a} served, {b} stored"
                );
            }
        }
        let info: std::collections::HashMap<String, zbus::OwnedVariant> =
            call(&conn, BOUNDS, "GetBoundInfo", &("needle", 64u32))
                .await
                .expect("GetBoundInfo");
        assert_eq!(f64::try_from(&info["process_shift"]).unwrap(), 0.02);
        let notes = <&str>::try_from(&info["notes"]).unwrap();
        assert!(notes.contains("raised by 2.00% at start"), "{notes}");
        let log = d.log_text();
        d.stop();
        assert!(log.contains("raised by the difference"), "{log}");
        let mut again = Daemon::spawn(fx.address(), &fx.state(), &[]);
        wait_for_daemon(&conn, &mut again).await;
        assert_eq!(curves(&conn).await, old, "no job saved the raised bounds");
        again.stop();
        // A job saves the calibration, the other kernels' raised bounds with it, and the shift
        // they allow for: the next start raises nothing twice.
        let shifted = ["--process-shift", "0.02"];
        let mut d = Daemon::spawn(fx.address(), &fx.state(), &shifted);
        wait_for_daemon(&conn, &mut d).await;
        let job: u64 = call(&conn, CALIBRATION, "Recalibrate", &(vec!["needle"],))
            .await
            .expect("Recalibrate");
        assert_eq!(wait_for_job(&conn, job).await.0, "done");
        let after_job = curves(&conn).await;
        d.stop();
        let mut d = Daemon::spawn(fx.address(), &fx.state(), &shifted);
        wait_for_daemon(&conn, &mut d).await;
        let restarted = curves(&conn).await;
        assert_eq!(restarted, after_job, "raised again at the next start");
        for (kernel, curve) in raised.iter().filter(|(k, _)| *k != "needle") {
            assert_eq!(&restarted[kernel], curve, "{kernel}");
        }
        assert!(!d.log_text().contains("raised by the difference"));
        d.stop();
    })
    .await
    .expect("test ran past its time limit");
}

/// `ops_support/fail_dir_sync.c` built into `dir`, or `None` (skipped) without gcc; in CI its
/// absence fails the test.
fn dir_sync_fault(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    let out = dir.join("fail_dir_sync.so");
    let source = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/ops_support/fail_dir_sync.c"
    );
    let built = std::process::Command::new("gcc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&out)
        .arg(source)
        .arg("-ldl")
        .status();
    match built {
        Ok(s) if s.success() => Some(out),
        other => {
            let why = format!("fault injection not built (gcc: {other:?}); apt-get install gcc");
            assert!(std::env::var_os("CI").is_none(), "{why}");
            println!("SKIPPED {why}");
            None
        }
    }
}

/// A save renamed into place whose directory cannot then be synced is published, not reported
/// as "not published": the file already holds the new bounds, so a restart serves them, and
/// serving the old ones until then would be a state no file ever had. Health names the failed
/// sync until a save succeeds. The fault is a real EIO from fsync(2) (LD_PRELOAD), not a flag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_save_whose_directory_sync_fails_is_published_and_named_in_health() {
    tokio::time::timeout(Duration::from_secs(90), async {
        let fx = Fixture::new();
        let Some(shim) = dir_sync_fault(fx.dir.path()) else {
            return;
        };
        let conn = fx.connect().await;
        let old = calibrate_state(&fx).await;
        let flag = fx.dir.path().join("fail-dir-sync");
        let env = [
            ("LD_PRELOAD", shim.as_os_str()),
            ("WCETD_TEST_FAULT_FLAG", flag.as_os_str()),
        ];
        let mut d = Daemon::spawn_with_env(fx.address(), &fx.state(), &["--seed", "2"], &env);
        wait_for_daemon(&conn, &mut d).await;
        assert_eq!(health(&conn).await, "ok");
        std::fs::write(&flag, b"").unwrap();
        let job: u64 = call(&conn, CALIBRATION, "Recalibrate", &(vec!["needle"],))
            .await
            .expect("Recalibrate");
        let (state, message) = wait_for_job(&conn, job).await;
        assert_eq!(state, "done", "{message}");
        let h = health(&conn).await;
        assert!(
            h.starts_with("degraded")
                && h.contains("could not be synced")
                && h.contains("published"),
            "Health after a save whose directory sync failed: {h}"
        );
        let published = curves(&conn).await;
        assert_ne!(
            published["needle"], old["needle"],
            "seed 2 measures other bounds"
        );
        // A crash, not a power cut: the renamed file is what the next start reads.
        d.kill9();
        std::fs::remove_file(&flag).unwrap();
        let mut d = Daemon::spawn(fx.address(), &fx.state(), &[]);
        wait_for_daemon(&conn, &mut d).await;
        assert_eq!(
            curves(&conn).await,
            published,
            "a restart serves what was published"
        );
        // A save whose sync succeeds makes every earlier rename durable too: Health is ok again.
        let job: u64 = call(&conn, CALIBRATION, "Recalibrate", &(vec!["needle"],))
            .await
            .expect("Recalibrate");
        assert_eq!(wait_for_job(&conn, job).await.0, "done");
        assert_eq!(health(&conn).await, "ok");
        d.stop();
    })
    .await
    .expect("test ran past its time limit");
}

/// A second SIGTERM while the first waits for a GPU worker in the middle of a long batch (a
/// launch that takes seconds, as a hung one on a GPU would) ends the wait: the daemon exits
/// cleanly without the worker. The job it was running never ended, so it is not announced as
/// ended; the next start serves the bounds of before and names that job in Health, as after a
/// crash. The same path follows a worker that outlasts the 20 s wait. Meanwhile a new job is
/// `Busy`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_stops_waiting_for_a_worker_in_a_long_batch() {
    tokio::time::timeout(Duration::from_secs(90), async {
        use futures_util::StreamExt;
        let fx = Fixture::new();
        let conn = fx.connect().await;
        let old = calibrate_state(&fx).await;
        // 0.2 s a launch: the first batch's progress arrives within seconds, the next batch
        // does not end for several more.
        let slow = ["--sim-pace-us", "200000", "--screen-launches", "40"];
        let mut d = Daemon::spawn(fx.address(), &fx.state(), &slow);
        wait_for_daemon(&conn, &mut d).await;
        let calibration = wcetd::client::CalibrationProxy::new(&conn).await.unwrap();
        let mut progress = calibration.receive_job_progress().await.unwrap();
        let job = calibration.recalibrate(&["needle"]).await.unwrap();
        while let Some(signal) = progress.next().await {
            if signal.args().unwrap().job == job {
                break;
            }
        }
        // Queued behind it: a stop ends a queued job at once, which says the stop has begun.
        let queued = calibration.recalibrate(&["lud"]).await.unwrap();
        let mut finished = job_finished(&conn, Some(wcetd::bus::BUS_NAME)).await;
        let pid = d.pid() as libc::pid_t;
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let cancelled = (queued, "cancelled".to_string());
        assert_eq!(next_finished(&mut finished).await, cancelled);
        // While the stop waits for the worker, a new job is refused, saying why.
        let refused: Result<u64, zbus::Error> =
            call(&conn, CALIBRATION, "Recalibrate", &(vec!["srad"],)).await;
        assert_eq!(error_name(&refused), "org.wcetd.Error.Busy", "{refused:?}");
        assert!(format!("{refused:?}").contains("the daemon is stopping"));
        let second = std::time::Instant::now();
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        d.stop();
        println!("exited {:?} after the second SIGTERM", second.elapsed());
        let log = d.log_text();
        assert!(
            log.contains("again: not waiting for the GPU workers"),
            "{log}"
        );
        assert!(!log.contains(&format!("job finished job={job}")), "{log}");
        let mut d = Daemon::spawn(fx.address(), &fx.state(), &[]);
        wait_for_daemon(&conn, &mut d).await;
        assert_eq!(curves(&conn).await, old, "the bounds of before are served");
        let said = health(&conn).await;
        assert!(
            said.starts_with("degraded: an earlier run ended during job")
                && said.contains("calibrating needle, started"),
            "{said}"
        );
        d.stop();
    })
    .await
    .expect("test ran past its time limit");
}

/// The next `JobFinished` on `stream`: (job, state).
async fn next_finished(stream: &mut zbus::MessageStream) -> (u64, String) {
    use futures_util::StreamExt;
    let msg = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("JobFinished")
        .expect("stream open")
        .expect("signal");
    let (id, state, _): (u64, String, String) = msg.body().deserialize().unwrap();
    (id, state)
}
