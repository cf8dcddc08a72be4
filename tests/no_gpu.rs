//! On a machine without an NVIDIA driver: an explicit CUDA backend is refused with a clear
//! message (no panic), and the default backend falls back to the simulator and says so.

use std::process::Command;

#[test]
fn explicit_cuda_without_a_driver_exits_with_a_clear_message() {
    if cudarc_present() {
        eprintln!("skipped: an NVIDIA driver is present on this machine");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_wcetd"))
        .args(["--backend", "cuda", "--state-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no NVIDIA driver found: libcuda could not be loaded"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn the_default_backend_falls_back_to_the_simulator_with_a_warning() {
    if cudarc_present() {
        eprintln!("skipped: an NVIDIA driver is present on this machine");
        return;
    }
    let gpu = wcetd::gpu::open(
        wcetd::gpu::BackendChoice::Auto,
        wcetd::gpu::sim::DeviceProfile::embedded(),
        Default::default(),
    )
    .unwrap();
    assert_eq!(gpu.info().backend, wcetd::gpu::Backend::Sim);
    assert_eq!(gpu.info().total_sms, 16);
}

/// A driver library or a loaded driver: `--backend auto` then uses or refuses the GPU, and
/// the simulator fallback is not what these tests can see.
fn cudarc_present() -> bool {
    [
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        "/usr/lib64/libcuda.so.1",
        "/usr/local/nvidia/lib64/libcuda.so.1",
        "/dev/nvidiactl",
    ]
    .iter()
    .any(|p| std::path::Path::new(p).exists())
}

/// `cmd` runs wcetd on the simulator with no bus to use, so that it starts its own private one,
/// with its state and the bus's directory in `dir`.
fn on_a_private_bus(cmd: &mut Command, dir: &std::path::Path) {
    cmd.args([
        "--backend",
        "sim",
        "--no-initial-calibration",
        "--state-dir",
    ])
    .arg(dir.join("state"))
    .env("XDG_RUNTIME_DIR", dir)
    .env_remove("DBUS_SESSION_BUS_ADDRESS")
    .env(
        "DBUS_SYSTEM_BUS_ADDRESS",
        "unix:path=/nonexistent/system_bus_socket",
    );
}

/// One daemon per state directory, and nothing left running by one killed outright: a second
/// `wcetd` on the same directory is refused and names the first; after SIGKILL, the private
/// `dbus-daemon` the first started ends too (waited on with a pidfd, not polled).
#[test]
fn a_state_directory_has_one_daemon_and_a_killed_one_leaves_no_bus() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    // Bounded: a second daemon that is not refused would otherwise run forever.
    let daemon = |extra: &[&str]| {
        let mut cmd = Command::new("timeout");
        cmd.args(["30", env!("CARGO_BIN_EXE_wcetd")]);
        on_a_private_bus(&mut cmd, dir.path());
        cmd.args(extra);
        cmd
    };
    let mut first = daemon(&[])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The first line printed says it serves on its private bus: it owns the directory by then.
    let mut lines = std::io::BufReader::new(first.stdout.take().unwrap()).lines();
    let serving = lines.next().unwrap().unwrap();
    assert!(
        serving.contains("serving org.wcetd.Wcetd1 on unix:"),
        "{serving}"
    );
    let second = daemon(&[]).output().unwrap();
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success());
    let holder = std::fs::read_to_string(dir.path().join("state/wcetd.lock")).unwrap();
    assert!(
        err.contains("is in use by another wcetd") && err.contains(&format!("pid {holder}")),
        "{err}"
    );
    // The private bus is the dbus-daemon whose configuration is in wcetd-<pid of the daemon>.
    let conf_of = |holder: &str| dir.path().join(format!("wcetd-{}/bus.conf", holder.trim()));
    let bus_of = |holder: &str| -> i32 {
        let conf = conf_of(holder);
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .find(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(conf.to_str().unwrap()))
            })
            .expect("the private dbus-daemon")
    };
    let conf = conf_of(&holder);
    let bus_pid = bus_of(&holder);
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, bus_pid, 0) } as i32;
    assert!(pidfd >= 0, "pidfd_open");
    // SAFETY: SIGKILL to the first daemon (the child of `timeout`), by its pid.
    unsafe { libc::kill(holder.trim().parse().unwrap(), libc::SIGKILL) };
    first.wait().unwrap();
    let mut ready = libc::pollfd {
        fd: pidfd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd, owned here; a pidfd becomes readable when its process ends.
    let n = unsafe { libc::poll(&mut ready, 1, 20_000) };
    assert_eq!(
        n, 1,
        "the private bus outlived the daemon killed with SIGKILL"
    );
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(pidfd) };
    // The directory the killed daemon left is removed by the next start.
    let mut third = daemon(&[])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(third.stdout.take().unwrap()).lines();
    assert!(lines.next().unwrap().unwrap().contains("serving"));
    assert!(
        !conf.parent().unwrap().exists(),
        "the dead daemon's bus directory is left"
    );
    // A service manager stops every process of the unit at once: the private bus may be seen
    // gone before the daemon's own SIGTERM is. That is a shutdown, not a lost name (exit 0).
    let holder = std::fs::read_to_string(dir.path().join("state/wcetd.lock")).unwrap();
    let bus_pid = bus_of(&holder);
    // SAFETY: SIGTERM to the third daemon's private bus, then to the daemon, by pid.
    unsafe {
        libc::kill(bus_pid, libc::SIGTERM);
        libc::kill(holder.trim().parse().unwrap(), libc::SIGTERM);
    }
    let status = third.wait().unwrap();
    assert!(status.success(), "{status}");
}

/// SIGHUP (the terminal a daemon was started from closed) is a clean stop: exit 0, and the
/// private bus and its directory are gone.
#[test]
fn a_hangup_stops_the_daemon_cleanly() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wcetd"));
    on_a_private_bus(&mut cmd, dir.path());
    let mut daemon = cmd.stdout(std::process::Stdio::piped()).spawn().unwrap();
    let mut lines = std::io::BufReader::new(daemon.stdout.take().unwrap()).lines();
    assert!(lines.next().unwrap().unwrap().contains("serving"));
    let bus_dir = dir.path().join(format!("wcetd-{}", daemon.id()));
    assert!(bus_dir.exists());
    // SAFETY: SIGHUP to our own child, by pid.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGHUP) };
    let status = daemon.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(!bus_dir.exists(), "the private bus directory is left");
}

/// `wcetd 2>&1 | head -1`: a reader of the daemon's log that has gone (here, before its first
/// line) costs the daemon and its private bus their log lines, not their service. Tracing's
/// fallback `eprintln!` panicked on the closed pipe (status 101), and the private dbus-daemon,
/// sharing it, died of SIGPIPE at its first warning, which ended the daemon for the lost bus (a
/// hunt and a review found them).
#[test]
fn a_daemon_whose_log_reader_has_gone_serves_on() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wcetd"));
    on_a_private_bus(&mut cmd, dir.path());
    let mut daemon = cmd
        .env("RUST_LOG", "debug")
        .stdout(std::process::Stdio::piped())
        .stderr(writer)
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(daemon.stdout.take().unwrap()).lines();
    let serving = lines.next().expect("a line").unwrap();
    assert!(serving.contains("serving org.wcetd.Wcetd1"), "{serving}");
    drop(lines);
    let list = Command::new(env!("CARGO_BIN_EXE_wcetctl"))
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("list")
        .env_remove("DBUS_SESSION_BUS_ADDRESS")
        .env_remove("WCETD_BUS_ADDRESS")
        .output()
        .unwrap();
    assert!(list.status.success(), "{list:?}");
    // SAFETY: SIGTERM to our own child, by pid.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let status = daemon.wait().unwrap();
    assert!(status.success(), "{status}");
}

/// A runtime directory whose name a D-Bus address must escape (a space, a comma, an `=`) still
/// gets a private bus: the socket's path is escaped in the bus's configuration.
#[test]
fn a_private_bus_in_a_directory_with_odd_characters_serves() {
    use std::io::BufRead;
    let top = tempfile::tempdir().unwrap();
    let dir = top.path().join("run dir,a=b&<c>");
    std::fs::create_dir(&dir).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wcetd"));
    on_a_private_bus(&mut cmd, &dir);
    let mut daemon = cmd.stdout(std::process::Stdio::piped()).spawn().unwrap();
    let mut lines = std::io::BufReader::new(daemon.stdout.take().unwrap()).lines();
    let serving = lines.next().expect("a line").unwrap();
    assert!(
        serving.contains("serving org.wcetd.Wcetd1 on unix:"),
        "{serving}"
    );
    // A client finds it by the address the daemon recorded, escapes and all.
    let list = Command::new(env!("CARGO_BIN_EXE_wcetctl"))
        .arg("--state-dir")
        .arg(dir.join("state"))
        .arg("list")
        .env_remove("DBUS_SESSION_BUS_ADDRESS")
        .env_remove("WCETD_BUS_ADDRESS")
        .output()
        .unwrap();
    assert!(
        list.status.success() && String::from_utf8_lossy(&list.stdout).contains("needle"),
        "{list:?}"
    );
    // SAFETY: SIGTERM to our own child, by pid.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    assert!(daemon.wait().unwrap().success());
}

/// `wcetctl watch` goes on when a daemon on its own private bus restarts: the bus goes with the
/// daemon and the restarted one records another, which watch finds where it found the first (it
/// ended with "Broken pipe", status 2; a black-box hunt found it).
#[test]
fn watch_follows_a_daemon_that_restarts_on_a_private_bus() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let daemon = || {
        let mut cmd = Command::new("timeout");
        cmd.args(["60", env!("CARGO_BIN_EXE_wcetd")]);
        on_a_private_bus(&mut cmd, dir.path());
        let mut child = cmd.stdout(std::process::Stdio::piped()).spawn().unwrap();
        // Its first line says it serves: the bus address is recorded by then.
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        assert!(lines.next().unwrap().unwrap().contains("serving"));
        child
    };
    let stop = |child: &mut std::process::Child| {
        let holder = std::fs::read_to_string(dir.path().join("state/wcetd.lock")).unwrap();
        // SAFETY: SIGTERM to the daemon (the child of `timeout`), by its pid.
        unsafe { libc::kill(holder.trim().parse().unwrap(), libc::SIGTERM) };
        assert!(child.wait().unwrap().success());
    };
    let mut first = daemon();
    let mut watch = Command::new("timeout")
        .args(["60", env!("CARGO_BIN_EXE_wcetctl"), "--state-dir"])
        .arg(dir.path().join("state"))
        .args(["--json", "watch", "--interval", "0.05"])
        .env_remove("DBUS_SESSION_BUS_ADDRESS")
        .env_remove("WCETD_BUS_ADDRESS")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(watch.stdout.take().unwrap()).lines();
    let mut next = || -> serde_json::Value {
        serde_json::from_str(&lines.next().expect("a line from watch").unwrap()).unwrap()
    };
    assert!(next().get("observed").is_some(), "a snapshot first");
    stop(&mut first);
    let mut second = daemon();
    // Snapshots of the second daemon: snapshots (or waiting lines) until one names its time.
    let restarted = chrono::Utc::now();
    let mut after = None;
    while after.is_none() {
        let line = next();
        let time = line["time"].as_str().unwrap();
        let at = chrono::DateTime::parse_from_rfc3339(time).unwrap();
        if line.get("observed").is_some() && at > restarted {
            after = Some(line);
        }
    }
    assert!(watch.try_wait().unwrap().is_none(), "watch still runs");
    // SAFETY: SIGTERM to `timeout`, by its pid, which passes it on to watch.
    unsafe { libc::kill(watch.id() as i32, libc::SIGTERM) };
    watch.wait().unwrap();
    stop(&mut second);
}

/// `wcetctl watch` that found its daemon on the session bus reconnects to the session bus when
/// the bus itself restarts, and is not drawn meanwhile to another daemon whose private bus its
/// state directory records (a review: reconnecting by the same search as at start found that
/// one, and showed its rows as the first daemon's).
#[test]
fn watch_on_the_session_bus_stays_on_it_through_a_restart() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let session_dir = dir.path().join("session");
    // Both session buses listen on the same socket; the address has no guid, so it names either.
    let session_address = format!("unix:path={}", session_dir.join("bus").display());
    let buses = |cmd: &mut Command| {
        cmd.env("DBUS_SESSION_BUS_ADDRESS", &session_address)
            .env(
                "DBUS_SYSTEM_BUS_ADDRESS",
                "unix:path=/nonexistent/system_bus_socket",
            )
            .env("XDG_RUNTIME_DIR", dir.path())
            .env_remove("WCETD_BUS_ADDRESS");
    };
    // A daemon on the session bus (state `a`), or on its own private bus (state `watcher`, the
    // directory watch searches); each waited for by its first line, which says it serves.
    let daemon = |state: &str, on_session: bool| {
        let mut cmd = Command::new("timeout");
        cmd.args(["60", env!("CARGO_BIN_EXE_wcetd")])
            .args([
                "--backend",
                "sim",
                "--no-initial-calibration",
                "--state-dir",
            ])
            .arg(dir.path().join(state));
        buses(&mut cmd);
        if on_session {
            cmd.arg("--session");
        } else {
            // Without a session bus, the daemon starts its own.
            cmd.env_remove("DBUS_SESSION_BUS_ADDRESS");
        }
        let mut child = cmd.stdout(std::process::Stdio::piped()).spawn().unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        assert!(lines.next().unwrap().unwrap().contains("serving"));
        child
    };
    let stop = |child: &mut std::process::Child, state: &str| {
        let lock = dir.path().join(state).join("wcetd.lock");
        let holder = std::fs::read_to_string(lock).unwrap();
        // SAFETY: SIGTERM to the daemon (the child of `timeout`), by its pid.
        unsafe { libc::kill(holder.trim().parse().unwrap(), libc::SIGTERM) };
        assert!(child.wait().unwrap().success());
    };
    let session = wcetd::bus::PrivateBus::start(&session_dir).unwrap();
    let mut first = daemon("a", true);
    // A launch time only the session bus's daemon has, kept across its restart.
    let mut report = Command::new(env!("CARGO_BIN_EXE_wcetctl"));
    report.args(["report", "bfs", "32", "123456"]);
    buses(&mut report);
    assert!(report.status().unwrap().success());
    let mut watch = Command::new("timeout");
    watch
        .args(["60", env!("CARGO_BIN_EXE_wcetctl"), "--state-dir"])
        .arg(dir.path().join("watcher"))
        .args(["--json", "watch", "--interval", "0.05"]);
    buses(&mut watch);
    let mut watch = watch.stdout(std::process::Stdio::piped()).spawn().unwrap();
    let mut lines = std::io::BufReader::new(watch.stdout.take().unwrap()).lines();
    let mut next = || -> serde_json::Value {
        serde_json::from_str(&lines.next().expect("a line from watch").unwrap()).unwrap()
    };
    let reported = |line: &serde_json::Value| {
        line["observed"]
            .as_array()
            .is_some_and(|rows| rows.iter().any(|r| r["max_ns"] == 123456))
    };
    assert!(
        reported(&next()),
        "a snapshot of the session bus's daemon first"
    );
    // Another daemon, on a private bus the watcher's state directory records; then the session
    // bus goes, and the daemon on it with it (it exits to be restarted).
    let mut other = daemon("watcher", false);
    drop(session);
    assert!(!first.wait().unwrap().success());
    let session = wcetd::bus::PrivateBus::start(&session_dir).unwrap();
    let mut again = daemon("a", true);
    // Every snapshot is the session bus's daemon's, until one from after its restart.
    let restarted = chrono::Utc::now();
    loop {
        let line = next();
        let Some(time) = line["time"].as_str() else {
            continue;
        };
        if line.get("observed").is_none() {
            continue;
        }
        assert!(reported(&line), "a snapshot of another daemon: {line}");
        if chrono::DateTime::parse_from_rfc3339(time).unwrap() > restarted {
            break;
        }
    }
    assert!(watch.try_wait().unwrap().is_none(), "watch still runs");
    // SAFETY: SIGTERM to `timeout`, by its pid, which passes it on to watch.
    unsafe { libc::kill(watch.id() as i32, libc::SIGTERM) };
    watch.wait().unwrap();
    stop(&mut again, "a");
    stop(&mut other, "watcher");
    drop(session);
}
