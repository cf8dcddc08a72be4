//! Who may recalibrate: on a private bus, whose config lets anyone connect and call anything, the
//! daemon's own check must still refuse `Calibration1` to an unprivileged user (`nobody`) while
//! root succeeds and `nobody` may still read bounds; and nobody may take the daemon's name.
//! Uses `busctl` as the operator would.

mod ops_support;

use ops_support::*;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};
use std::time::Duration;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `busctl call` of the daemon's object on `address`, as `nobody` when `unprivileged`.
fn busctl(address: &str, unprivileged: bool, args: &[&str]) -> Output {
    busctl_call(address, unprivileged, &[&[NAME, PATH], args].concat())
}

/// `busctl call ARGS` on `address`, as `nobody` when `unprivileged`; bounded by `timeout` so a
/// stuck bus fails the test instead of hanging it.
fn busctl_call(address: &str, unprivileged: bool, args: &[&str]) -> Output {
    let mut cmd = Command::new("timeout");
    cmd.arg("20");
    if unprivileged {
        cmd.args([
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
        ]);
    }
    cmd.args([
        "busctl",
        "--no-pager",
        &format!("--address={address}"),
        "call",
    ]);
    cmd.args(args).output().expect("running busctl")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_is_refused_recalibrate_and_root_is_not() {
    if !is_root() {
        println!("note: not running as root; cannot switch to `nobody`, skipping the access-control test");
        return;
    }
    if !have("busctl") || !have("setpriv") {
        println!("note: busctl or setpriv missing; skipping the access-control test");
        return;
    }
    tokio::time::timeout(Duration::from_secs(60), async {
        let fx = Fixture::new();
        // nobody must reach the socket: every directory on its path traversable.
        for dir in [fx.dir.path().to_path_buf(), fx.dir.path().join("bus")] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let conn = fx.connect().await;
        let mut d = Daemon::spawn(fx.address(), &fx.state(), &[]);
        wait_for_daemon(&conn, &mut d).await;
        wait_for_job(&conn, 1).await;

        let recalibrate = [CALIBRATION, "Recalibrate", "as", "0"];
        let denied = busctl(fx.address(), true, &recalibrate);
        let stderr = String::from_utf8_lossy(&denied.stderr);
        assert!(
            !denied.status.success(),
            "nobody's Recalibrate succeeded: {}",
            String::from_utf8_lossy(&denied.stdout)
        );
        // busctl reports AccessDenied as EACCES ("Access denied") and drops the message, so the
        // daemon's log and dbus-send (which prints the error name) tell whose refusal it was.
        assert!(stderr.contains("Access denied"), "busctl said: {stderr}");
        assert!(
            d.log_text().contains("uid=65534") && d.log_text().contains("refused an operator call")
        );
        if have("dbus-send") {
            let out = Command::new("timeout")
                .args([
                    "20",
                    "setpriv",
                    "--reuid=nobody",
                    "--regid=nogroup",
                    "--clear-groups",
                    "dbus-send",
                ])
                .args([
                    &format!("--bus={}", fx.address()),
                    "--print-reply",
                    &format!("--dest={NAME}"),
                    PATH,
                ])
                .args([&format!("{CALIBRATION}.Recalibrate"), "array:string:"])
                .output()
                .expect("running dbus-send");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains("org.freedesktop.DBus.Error.AccessDenied")
                    && stderr.contains("is for operators"),
                "dbus-send said: {stderr}"
            );
        }

        for method in [["GetJob", "t", "1"], ["CancelJob", "t", "1"]] {
            let out = busctl(
                fx.address(),
                true,
                &[CALIBRATION, method[0], method[1], method[2]],
            );
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                !out.status.success() && stderr.contains("Access denied"),
                "nobody's {}: {stderr}",
                method[0]
            );
        }

        let reads = busctl(fx.address(), true, &[BOUNDS, "GetBound", "su", "bfs", "16"]);
        assert!(
            reads.status.success(),
            "nobody may read bounds: {}",
            String::from_utf8_lossy(&reads.stderr)
        );
        assert!(String::from_utf8_lossy(&reads.stdout).starts_with("t "));

        let allowed = busctl(fx.address(), false, &recalibrate);
        let stdout = String::from_utf8_lossy(&allowed.stdout);
        assert!(
            allowed.status.success(),
            "root's Recalibrate failed: {}",
            String::from_utf8_lossy(&allowed.stderr)
        );
        let job: u64 = stdout
            .trim()
            .strip_prefix("t ")
            .and_then(|j| j.parse().ok())
            .expect("a job number");
        assert_eq!(wait_for_job(&conn, job).await.0, "done");

        assert!(
            d.log_text().contains("refused an operator call"),
            "the refusal is logged"
        );

        // Nobody may take the daemon's name and answer in its place: not another user (the
        // private bus's policy), not even the daemon's own user asking to replace it (the daemon
        // owns it without ALLOW_REPLACEMENT).
        let request_name = |unprivileged: bool| {
            let bus = ["org.freedesktop.DBus", "/org/freedesktop/DBus"];
            let call = ["org.freedesktop.DBus", "RequestName", "su", NAME, "6"];
            busctl_call(fx.address(), unprivileged, &[&bus[..], &call].concat())
        };
        let taken = request_name(true);
        assert!(
            !taken.status.success()
                && String::from_utf8_lossy(&taken.stderr).contains("Access denied"),
            "nobody's RequestName: {} {}",
            String::from_utf8_lossy(&taken.stdout),
            String::from_utf8_lossy(&taken.stderr)
        );
        let replaced = request_name(false);
        // Flags REPLACE_EXISTING and DO_NOT_QUEUE; 3: EXISTS (1 would mean the name was taken).
        assert_eq!(String::from_utf8_lossy(&replaced.stdout).trim(), "u 3");
        let reads = busctl(fx.address(), true, &[BOUNDS, "GetBound", "su", "bfs", "16"]);
        assert!(reads.status.success(), "the daemon still answers");
        d.stop();
    })
    .await
    .expect("test ran past its time limit");
}
