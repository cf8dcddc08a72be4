//! The command lines as an operator meets them: versions, a missing daemon, Ctrl-C during
//! `recalibrate`, `jobs` and `cancel`, the daemon's configuration file and its log format.
//! Everything runs against the real binaries on a private bus; waits are on bus signals.

mod admission_support;

use std::process::{Command, Stdio};
use std::time::Duration;

use admission_support::{wcetctl, write, Env};
use futures_util::StreamExt;

const WAIT: Duration = Duration::from_secs(60);

#[test]
fn versions_name_their_program() {
    for (bin, name) in [
        (env!("CARGO_BIN_EXE_wcetctl"), "wcetctl "),
        (env!("CARGO_BIN_EXE_wcetd"), "wcetd "),
    ] {
        let out = Command::new(bin).arg("--version").output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.starts_with(name), "{text}");
    }
}

/// No daemon on the bus: the message says what was tried and how to point wcetctl elsewhere.
/// Standard output that cannot be written (a full disk) is an error with exit status 2, not a
/// panic (a black-box run got status 101 and a backtrace from most commands).
#[test]
fn a_full_standard_output_is_an_error_not_a_panic() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        eprintln!("skipped: no /dev/full here");
        return;
    };
    let out = Command::new(env!("CARGO_BIN_EXE_wcetctl"))
        .arg("prediction-study")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(full)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("failed printing to stdout") && !err.contains("panicked"),
        "{err}"
    );
}

/// With no bus named, a session bus without the daemon does not hide the system service: a
/// login under systemd has a session bus, and wcetctl stopped there ("no daemon owns ...").
#[tokio::test]
async fn wcetctl_finds_the_system_daemon_past_a_session_bus_without_one() {
    let system = Env::new();
    let session = Env::new();
    let daemon = system.daemon(&["--no-initial-calibration"]).await;
    let nowhere = session.dir.path().join("no-state");
    let run = |session_address: &str| {
        Command::new(env!("CARGO_BIN_EXE_wcetctl"))
            .args(["--state-dir", nowhere.to_str().unwrap(), "list"])
            .env_remove("WCETD_BUS_ADDRESS")
            .env("DBUS_SESSION_BUS_ADDRESS", session_address)
            .env("DBUS_SYSTEM_BUS_ADDRESS", system.address())
            .output()
            .unwrap()
    };
    let out = run(session.address());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("needle"),
        "{err}"
    );
    drop(daemon);
    let out = run(session.address());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no daemon owns org.wcetd.Wcetd1")
            && err.contains("the session bus, then the system bus"),
        "{err}"
    );
}

#[tokio::test]
async fn a_missing_daemon_is_explained() {
    let env = Env::new();
    let (code, _, err) = wcetctl(env.address(), &["list"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("no daemon owns org.wcetd.Wcetd1")
            && err.contains("tried --bus-address")
            && err.contains("WCETD_BUS_ADDRESS"),
        "{err}"
    );
    let gone = format!("unix:path={}/nothing-here", env.dir.path().display());
    let (code, _, err) = wcetctl(&gone, &["status"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("cannot reach a bus") && err.contains("nothing-here"),
        "{err}"
    );
    // A file the command reads is checked first: a missing one is named, not the bus.
    for args in [
        &["admit", "/nonexistent/set.toml"][..],
        &["import", "--samples", "/nonexistent/samples.csv"][..],
    ] {
        let (code, _, err) = wcetctl(&gone, args);
        assert_eq!(code, Some(2));
        assert!(
            err.contains("/nonexistent/") && err.contains("No such file") && !err.contains("bus"),
            "{err}"
        );
    }
}

/// `wcetd | head -1`: a reader of the daemon's standard output that has gone (here, before the
/// first line) costs it the lines, not its service. `println!` panicked on the closed pipe, and
/// the daemon ended with status 101 (a hunt found it).
#[tokio::test]
async fn the_daemon_serves_on_when_its_standard_output_is_gone() {
    let env = Env::new();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let d = env
        .daemon_writing_to(&["--no-initial-calibration"], Stdio::from(writer))
        .await;
    // It announces itself right after taking its name, before it handles any signal: a SIGTERM
    // now is handled after the lines were written (or failed).
    let ping = wcetd::client::BoundsProxy::new(&d.conn)
        .await
        .unwrap()
        .ping()
        .await;
    assert!(ping.is_ok(), "{ping:?}");
    let status = d.stop();
    assert!(status.success(), "wcetd exited {status}");
}

/// A call timeout that is not a positive whole number is refused, not ignored (it was: `abc`
/// meant the default minute without a word).
#[test]
fn a_call_timeout_that_is_not_a_number_of_seconds_is_refused() {
    for bad in ["abc", "-1", "0", "1.5"] {
        let out = Command::new(env!("CARGO_BIN_EXE_wcetctl"))
            .args(["--bus-address", "unix:path=/nonexistent/bus", "list"])
            .env("WCETD_CALL_TIMEOUT_S", bad)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        assert!(
            err.contains(&format!(
                "$WCETD_CALL_TIMEOUT_S is \"{bad}\"; accepted: a positive whole number"
            )),
            "{bad}: {err}"
        );
    }
}

/// A daemon that does not answer (stopped here with SIGSTOP) is a timeout that says so, not a
/// client waiting forever (a scheduler's `wcetctl admit` hung with it).
#[tokio::test]
async fn a_daemon_that_does_not_answer_is_a_timeout() {
    let env = Env::new();
    let d = env.daemon(&["--no-initial-calibration"]).await;
    let pid = d.pid() as i32;
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    // Methods, and properties (`status` and `curve` read them: a cached proxy waited on its
    // first read with no timeout); and `watch`, which took the timeout for a lost bus and
    // reconnected to the live one for ever without a line (bounded here by `timeout`).
    let watch = &["watch", "--count", "2", "--interval", "0.1"][..];
    let outs: Vec<_> = [&["list"][..], &["status"], &["curve", "needle"], watch]
        .iter()
        .map(|args| {
            Command::new("timeout")
                .args(["30", env!("CARGO_BIN_EXE_wcetctl")])
                .args(["--bus-address", env.address()])
                .args(*args)
                .env("WCETD_CALL_TIMEOUT_S", "1")
                .output()
                .unwrap()
        })
        .collect();
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    for out in outs {
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("did not answer within 1 s"), "{err}");
    }
    let (code, _, err) = wcetctl(env.address(), &["list"]);
    assert_eq!(code, Some(0), "answers again once continued: {err}");
}

/// A socket that takes the connection and never speaks is a timeout too: the handshake had no
/// limit, so a client (and `watch`, reconnecting) waited for ever (a review found it).
#[test]
fn a_bus_that_never_speaks_is_a_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("silent.sock");
    // Listening, so the connection is taken (by the kernel's backlog), and never answered.
    let _silent = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let out = Command::new("timeout")
        .args(["30", env!("CARGO_BIN_EXE_wcetctl"), "--bus-address"])
        .arg(format!("unix:path={}", path.display()))
        .arg("list")
        .env("WCETD_CALL_TIMEOUT_S", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no answer within 1 s"), "{err}");
}

/// Ctrl-C during `recalibrate` cancels the job, keeps the old bounds, and exits 130; `jobs`
/// shows the job cancelled, and `cancel` of a finished job says what is accepted.
#[tokio::test]
async fn ctrl_c_during_recalibrate_cancels_the_job() {
    let env = Env::new();
    let d = env
        .daemon(&[
            "--no-initial-calibration",
            "--sim-pace-us",
            "500",
            "--interference",
            "isolated",
        ])
        .await;
    let calibration = wcetd::client::CalibrationProxy::new(&d.conn).await.unwrap();
    let mut progress = calibration.receive_job_progress().await.unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_wcetctl"))
        .args(["--bus-address", env.address(), "recalibrate", "needle"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The job runs once its first progress signal comes; wcetctl listens for Ctrl-C before it
    // asks for the job.
    let first = tokio::time::timeout(WAIT, progress.next())
        .await
        .expect("no progress within a minute")
        .unwrap();
    assert_eq!(first.args().unwrap().job, 1);
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(130), "{stdout}{stderr}");
    assert!(
        stderr.contains("cancelling job 1") && stdout.contains("job 1: cancelled"),
        "{stdout}{stderr}"
    );
    let (code, out, _) = wcetctl(env.address(), &["--json", "jobs"]);
    assert_eq!(code, Some(0));
    let jobs: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(jobs[0]["state"], "cancelled", "{jobs}");
    let (name, _) = d
        .call::<_, u64>("org.wcetd.Bounds1", "GetBound", &("needle", 64u32))
        .await
        .unwrap_err();
    assert_eq!(name, "org.wcetd.Error.NotCalibrated");
    let (code, _, err) = wcetctl(env.address(), &["cancel", "1"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("already finished"), "{err}");
}

/// The configuration file sets what the flags leave, flags win, and a bad key is refused with
/// the keys accepted; log lines carry no colour codes off a terminal.
#[tokio::test]
async fn the_configuration_file_sets_options_and_flags_win() {
    let env = Env::new();
    // (file, its text, what the error must say besides the file's name): an unknown key with
    // the keys accepted; a value the flag refuses, named with the file, not only the flag; a
    // negative value too (it was read as a flag of its own, then checked without the file).
    let cases: [(&str, &str, &[&str]); 4] = [
        ("bad.toml", "lanches = 5\n", &["`lanches`", "launches"]),
        ("zero.toml", "launches = 0\n", &["--launches"]),
        (
            "timeout.toml",
            "launch-timeout = 0\n",
            &["--launch-timeout", "1..=86400"],
        ),
        (
            "negative.toml",
            "calibration-budget = -1\n",
            &["--calibration-budget", "accepted: seconds, 0 or more"],
        ),
    ];
    for (name, text, said) in cases {
        let file = write(env.dir.path(), name, text);
        let out = Command::new(env!("CARGO_BIN_EXE_wcetd"))
            .args(["--backend", "sim", "--config", file.to_str().unwrap()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            err.contains(name) && said.iter().all(|s| err.contains(s)),
            "{err}"
        );
    }
    // `contended` in the file conflicts with `--interference` given: the flag wins, no error.
    let file = write(
        env.dir.path(),
        "wcetd.toml",
        "contended = true\ncalibration-budget = 0\nlaunches = 60\n",
    );
    let d = env
        .daemon(&[
            "--config",
            file.to_str().unwrap(),
            "--interference",
            "isolated",
            "--no-initial-calibration",
        ])
        .await;
    let job: u64 = d
        .call("org.wcetd.Calibration1", "Recalibrate", &(vec!["needle"],))
        .await
        .unwrap();
    d.wait_job(job).await;
    let info = d.bound_info("needle", 64).await;
    let tags =
        <Vec<String>>::try_from(info["interference_available"].try_clone().unwrap()).unwrap();
    assert_eq!(tags, ["isolated"], "the flag wins over the file");
    let curve: Vec<(u32, u64)> = d
        .call("org.wcetd.Bounds1", "GetCurve", &("needle",))
        .await
        .unwrap();
    let mut measured = 0;
    for (m, _) in &curve {
        let info = d.bound_info("needle", *m).await;
        measured += usize::from(<&str>::try_from(&info["provenance"]).unwrap() == "measured");
    }
    assert!(
        measured < curve.len(),
        "calibration-budget = 0 from the file: the planner's sizes only, not all {measured}"
    );
    // Logs: the daemon's stderr is a pipe here, as under journald.
    let log = Command::new(env!("CARGO_BIN_EXE_wcetd"))
        .args(["--backend", "sim", "--no-initial-calibration", "--config"])
        .arg(&file)
        .args(["--bus-address", "unix:path=/nonexistent/bus", "--state-dir"])
        .arg(env.dir.path().join("log-state"))
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&log.stderr);
    assert!(text.contains("configuration read"), "{text}");
    assert!(!text.contains('\u{1b}'), "colour codes in a log: {text:?}");
}
