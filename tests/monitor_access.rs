//! Who may report: on a private bus, whose config lets anyone call anything, the daemon itself
//! refuses `Monitor1.Report` to a user outside root, its own user and the groups `wcetd` and the
//! reporter group, records nothing for them, and still lets them read (`GetObserved`). A member
//! of the reporter group may report. Uses `busctl` and `dbus-send` as users would, switching user
//! with `setpriv` (so it needs root; skipped otherwise).

mod ops_support;

use ops_support::*;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};
use std::time::Duration;

const MONITOR: &str = "org.wcetd.Monitor1";

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

/// The GID of `group`, when it exists here.
fn gid(group: &str) -> Option<u32> {
    let out = Command::new("getent")
        .args(["group", group])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .split(':')
        .nth(2)?
        .trim()
        .parse()
        .ok()
}

/// `program args` as `nobody`, with supplementary `groups` (none when empty), bounded in time.
fn as_nobody(groups: &[u32], program: &str, args: &[&str]) -> Output {
    let groups = if groups.is_empty() {
        "--clear-groups".to_string()
    } else {
        let list: Vec<String> = groups.iter().map(u32::to_string).collect();
        format!("--groups={}", list.join(","))
    };
    Command::new("timeout")
        .args([
            "20",
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            &groups,
            program,
        ])
        .args(args)
        .output()
        .expect("running setpriv")
}

fn busctl_args<'a>(address: &'a str, call: &[&'a str]) -> Vec<String> {
    let mut v = vec![
        "--no-pager".to_string(),
        format!("--address={address}"),
        "call".into(),
        NAME.into(),
        PATH.into(),
        MONITOR.into(),
    ];
    v.extend(call.iter().map(|s| s.to_string()));
    v
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

async fn count(conn: &zbus::Connection, kernel: &str, sms: u32) -> u64 {
    let d: std::collections::HashMap<String, zbus::OwnedVariant> =
        call(conn, MONITOR, "GetObserved", &(kernel, sms))
            .await
            .expect("GetObserved");
    u64::try_from(&d["count"]).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_root_the_daemon_user_and_the_groups_may_report() {
    if !is_root() {
        println!(
            "note: not running as root; cannot switch to `nobody`, skipping the report access test"
        );
        return;
    }
    if !have("busctl") || !have("setpriv") || !have("getent") {
        println!("note: busctl, setpriv or getent missing; skipping the report access test");
        return;
    }
    // A group that exists on every Debian-like system stands in for `wcetd-report`.
    let Some(users) = gid("users") else {
        println!("note: no group `users` to stand in for the reporter group; skipping");
        return;
    };
    tokio::time::timeout(Duration::from_secs(60), async {
        let fx = Fixture::new();
        for dir in [fx.dir.path().to_path_buf(), fx.dir.path().join("bus")] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let conn = fx.connect().await;
        let mut d = Daemon::spawn(fx.address(), &fx.state(), &["--report-group", "users"]);
        wait_for_daemon(&conn, &mut d).await;
        wait_for_job(&conn, 1).await;
        let report = busctl_args(
            fx.address(),
            &["Report", "suat", "hotspot", "64", "2", "1000", "2000"],
        );

        let denied = as_nobody(&[], "busctl", &strs(&report));
        let stderr = String::from_utf8_lossy(&denied.stderr);
        assert!(
            !denied.status.success() && stderr.contains("Access denied"),
            "nobody's Report: {stderr}"
        );
        if have("dbus-send") {
            let out = as_nobody(
                &[],
                "dbus-send",
                &[
                    &format!("--bus={}", fx.address()),
                    "--print-reply",
                    &format!("--dest={NAME}"),
                    PATH,
                    &format!("{MONITOR}.Report"),
                    "string:hotspot",
                    "uint32:64",
                    "array:uint64:1000",
                ],
            );
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains("org.freedesktop.DBus.Error.AccessDenied")
                    && stderr.contains("can raise bounds")
                    && stderr.contains("UID 65534 is none of them"),
                "dbus-send said: {stderr}"
            );
        }
        assert_eq!(
            count(&conn, "hotspot", 64).await,
            0,
            "a refused report recorded something"
        );
        assert!(d.log_text().contains("refused a report") && d.log_text().contains("uid=65534"));

        // Anyone may read.
        let read = as_nobody(
            &[],
            "busctl",
            &strs(&busctl_args(
                fx.address(),
                &["GetObserved", "su", "hotspot", "64"],
            )),
        );
        assert!(
            read.status.success(),
            "nobody may read: {}",
            String::from_utf8_lossy(&read.stderr)
        );

        // A member of the reporter group may report; so may root.
        let member = as_nobody(&[users], "busctl", &strs(&report));
        assert!(
            member.status.success(),
            "a reporter-group member's Report: {}",
            String::from_utf8_lossy(&member.stderr)
        );
        assert_eq!(count(&conn, "hotspot", 64).await, 2);
        let root = Command::new("busctl").args(strs(&report)).output().unwrap();
        assert!(
            root.status.success(),
            "root's Report: {}",
            String::from_utf8_lossy(&root.stderr)
        );
        assert_eq!(count(&conn, "hotspot", 64).await, 4);
        d.stop();
    })
    .await
    .expect("test ran past its time limit");
}
