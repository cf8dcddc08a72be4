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
    if let Some(binary) = compile_c_reporter(&fx) {
        run_reporter(&fx, &conn, "srad", binary.to_str().unwrap(), &[]).await;
    }
    d.stop();
}

/// `reporter.c` compiled into the fixture's directory, or `None` (skipped) without gcc and
/// libsystemd.
fn compile_c_reporter(fx: &Fixture) -> Option<PathBuf> {
    if !(works("gcc", &["--version"]) && works("pkg-config", &["--exists", "libsystemd"])) {
        skip("reporter.c: gcc or libsystemd not found (apt-get install gcc pkg-config libsystemd-dev)");
        return None;
    }
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
        .arg(clients_dir().join("reporter.c"))
        .arg("-o")
        .arg(&binary)
        .args(flags.split_whitespace())
        .status()
        .expect("gcc");
    assert!(status.success(), "reporter.c does not compile");
    Some(binary)
}

/// Run a reporter for `kernel` at 64 SMs while the daemon is away (stopped); once it says it is
/// keeping the times, restart the bus itself (the reporter's connection breaks, and the bus comes
/// back at the same path), then start the daemon again on the same state. The reporter must
/// deliver every time, the overrun included, and exit 0: a restart of the daemon or of the bus
/// must not lose a time that raises a bound.
async fn report_across_a_restart(
    bus: &mut Option<PrivateBus>,
    dir: &Path,
    kernel: &str,
    bound: u64,
    program: &str,
    args: &[&str],
) {
    use tokio::io::{AsyncBufReadExt, BufReader};
    // The bus's path without its guid, as a system bus's address is: the restarted bus has
    // another guid, which a client given the old one would refuse.
    let address = |bus: &PrivateBus| bus.address().split(",guid=").next().unwrap().to_string();
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .args([kernel, "64", &COUNT.to_string()])
        .env("WCETD_BUS_ADDRESS", address(bus.as_ref().unwrap()))
        .env("WCETD_REPORT_BOUND", bound.to_string())
        .env("WCETD_REPORT_WAIT_S", "60")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("starting the reporter");
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut said = Vec::new();
    let away = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = stderr.next_line().await.unwrap() {
            let keeping = line.contains("wcetd is away");
            said.push(line);
            if keeping {
                return true;
            }
        }
        false
    })
    .await
    .unwrap_or_else(|_| panic!("{program} never said the daemon was away"));
    assert!(away, "{program} ended without keeping its times: {said:?}");
    *bus = None;
    let restarted = PrivateBus::start(&dir.join("bus")).expect("restarting the bus");
    let conn = zbus::connection::Builder::address(restarted.address())
        .build()
        .await
        .expect("connecting to the restarted bus");
    let mut d = Daemon::spawn(restarted.address(), &dir.join("state"), &[]);
    *bus = Some(restarted);
    wait_for_daemon(&conn, &mut d).await;
    let rest = tokio::spawn(async move {
        let mut more = Vec::new();
        while let Ok(Some(line)) = stderr.next_line().await {
            more.push(line);
        }
        more
    });
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .unwrap_or_else(|_| panic!("{program} did not deliver within a minute of the restart"))
        .expect("the reporter's status");
    let mut stdout = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout)
        .await
        .unwrap();
    said.extend(rest.await.unwrap());
    assert!(status.success(), "{program}: {status}\n{stdout}\n{said:?}");
    let observed: HashMap<String, zbus::OwnedVariant> =
        call(&conn, "org.wcetd.Monitor1", "GetObserved", &(kernel, 64u32))
            .await
            .expect("GetObserved");
    let t = |k: &str| u64::try_from(&observed[k]).unwrap();
    assert_eq!(
        (t("count"), t("overruns")),
        (COUNT, 1),
        "{program}: {observed:?}\n{stdout}\n{said:?}"
    );
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reporters_keep_their_times_while_the_daemon_and_the_bus_restart() {
    let fx = Fixture::new();
    let curves = calibrate_state(&fx).await;
    let bound_at_64 = |kernel: &str| {
        let curve = curves[kernel].as_ref().unwrap();
        curve.iter().find(|(m, _)| *m == 64).unwrap().1
    };
    let c_reporter = compile_c_reporter(&fx);
    let Fixture { dir, bus } = fx;
    let mut bus = Some(bus);
    if works("python3", &["-c", "import jeepney"]) {
        let script = clients_dir().join("reporter.py");
        let args = [script.to_str().unwrap()];
        let bound = bound_at_64("hotspot");
        report_across_a_restart(&mut bus, dir.path(), "hotspot", bound, "python3", &args).await;
    } else {
        skip("reporter.py: python3 with jeepney not found (apt-get install python3-jeepney, or pip install jeepney)");
    }
    if let Some(binary) = c_reporter {
        let program = binary.to_str().unwrap();
        let bound = bound_at_64("srad");
        report_across_a_restart(&mut bus, dir.path(), "srad", bound, program, &[]).await;
    }
}
