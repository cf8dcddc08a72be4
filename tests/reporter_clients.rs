//! The reporting clients in `docs/clients/` (Python with jeepney, C with sd-bus) against the
//! simulated daemon on a private bus: each batches times off its launch path, reports them, and
//! the daemon counts every one and the one overrun. A client whose toolchain is missing is skipped
//! on a developer's machine and fails in CI (`CI` set), as in `tests/clients.rs`.

mod ops_support;

use ops_support::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const COUNT: u64 = 5000;

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/clients")
}

fn works(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn skip(why: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("client not run in CI: {why}");
    }
    println!("SKIPPED {why}");
}

/// Run a reporter for `kernel` at 64 SMs; insist it succeeds and the daemon counted its times.
async fn run_reporter(
    fx: &Fixture,
    conn: &zbus::Connection,
    kernel: &str,
    program: &str,
    args: &[&str],
) {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .args([kernel, "64", &COUNT.to_string()])
        .env("WCETD_BUS_ADDRESS", fx.address())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("{program} ran past its time limit"))
        .expect("starting the reporter");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{program} {args:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains(&format!("reported {COUNT} times")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("GetObserved({kernel}, 64)")),
        "{stdout}"
    );
    let d: HashMap<String, zbus::OwnedVariant> =
        call(conn, "org.wcetd.Monitor1", "GetObserved", &(kernel, 64u32))
            .await
            .expect("GetObserved");
    let t = |k: &str| u64::try_from(&d[k]).unwrap();
    assert_eq!((t("count"), t("overruns")), (COUNT, 1), "{program}: {d:?}");
    assert!(
        stdout.contains(&format!("count={COUNT}")) && stdout.contains("overruns=1"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_c_reporters_batch_and_report() {
    let fx = Fixture::new();
    let conn = fx.connect().await;
    let mut d = Daemon::spawn(fx.address(), &fx.state(), &[]);
    wait_for_daemon(&conn, &mut d).await;
    assert_eq!(wait_for_job(&conn, 1).await.0, "done");
    let dir = clients_dir();
    if works("python3", &["-c", "import jeepney"]) {
        let script = dir.join("reporter.py");
        run_reporter(
            &fx,
            &conn,
            "hotspot",
            "python3",
            &[script.to_str().unwrap()],
        )
        .await;
    } else {
        skip("reporter.py: python3 with jeepney not found (apt-get install python3-jeepney, or pip install jeepney)");
    }
    if works("gcc", &["--version"]) && works("pkg-config", &["--exists", "libsystemd"]) {
        let binary = fx.dir.path().join("reporter-c");
        let flags = String::from_utf8(
            Command::new("pkg-config")
                .args(["--cflags", "--libs", "libsystemd"])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        let status = Command::new("gcc")
            .args(["-std=c11", "-Wall", "-Werror", "-pthread"])
            .arg(dir.join("reporter.c"))
            .arg("-o")
            .arg(&binary)
            .args(flags.split_whitespace())
            .status()
            .expect("gcc");
        assert!(status.success(), "reporter.c does not compile");
        run_reporter(&fx, &conn, "srad", binary.to_str().unwrap(), &[]).await;
    } else {
        skip("reporter.c: gcc or libsystemd not found (apt-get install gcc pkg-config libsystemd-dev)");
    }
    d.stop();
}
