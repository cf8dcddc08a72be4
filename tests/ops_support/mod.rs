//! Shared by the operations tests (crash safety, access control, bus fuzzing): a private bus, the
//! real `wcetd` binary as a child process, and the few bus calls those tests make. Kept apart
//! from `tests/common` so these tests do not depend on the basic bus tests' helpers.
// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use zbus::Connection;

pub use wcetd::bus::PrivateBus;

pub const NAME: &str = "org.wcetd.Wcetd1";
pub const PATH: &str = "/org/wcetd/Wcetd1";
pub const BOUNDS: &str = "org.wcetd.Bounds1";
pub const CALIBRATION: &str = "org.wcetd.Calibration1";

/// How long any single wait in these tests may take before the test fails instead of hanging.
pub const WAIT: Duration = Duration::from_secs(60);

/// Launches per size: enough for the planner and the model, few enough to keep tests quick.
pub const LAUNCHES: &str = "40";

/// A running `wcetd`; killed (SIGKILL) when dropped so a failing test leaves nothing behind.
pub struct Daemon {
    pub child: Child,
    pub log: PathBuf,
}

impl Daemon {
    /// Start `wcetd --backend sim` on `bus` with `state`, plus `extra` flags; its stderr (the log)
    /// goes to `state/../wcetd-<n>.log`.
    pub fn spawn(bus: &str, state: &Path, extra: &[&str]) -> Daemon {
        Daemon::spawn_with_env(bus, state, extra, &[])
    }

    /// [`Daemon::spawn`] with `env` added to its environment.
    pub fn spawn_with_env(
        bus: &str,
        state: &Path,
        extra: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Daemon {
        let parent = state.parent().expect("state dir has a parent");
        let n = std::fs::read_dir(parent).map(|d| d.count()).unwrap_or(0);
        let log = parent.join(format!("wcetd-{n}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_wcetd"))
            .args([
                "--backend",
                "sim",
                "--launches",
                LAUNCHES,
                "--bus-address",
                bus,
                "--state-dir",
            ])
            .arg(state)
            .args(extra)
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("creating the daemon log"))
            .spawn()
            .expect("starting wcetd");
        Daemon { child, log }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, as a crash or the OOM killer would: no destructors, no flush.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait for a clean exit.
    pub fn stop(&mut self) {
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + WAIT;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("waiting for wcetd") {
                break status;
            }
            assert!(Instant::now() < deadline, "wcetd did not exit on SIGTERM");
            std::thread::sleep(Duration::from_millis(10));
        };
        // Killed by the signal itself means it was not caught: shutdown saved nothing.
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            status.signal(),
            None,
            "wcetd died of the SIGTERM instead of shutting down"
        );
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A temporary directory with a private bus in `bus/` and an empty `state/` beside it.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub bus: PrivateBus,
}

impl Fixture {
    pub fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let bus =
            PrivateBus::start(&dir.path().join("bus")).expect("starting a private dbus-daemon");
        Fixture { dir, bus }
    }

    pub fn address(&self) -> &str {
        self.bus.address()
    }

    pub fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    pub async fn connect(&self) -> Connection {
        zbus::connection::Builder::address(self.address())
            .build()
            .await
            .expect("connecting to the private bus")
    }
}

/// Call `method` and deserialize its reply.
pub async fn call<B, R>(
    conn: &Connection,
    iface: &str,
    method: &str,
    body: &B,
) -> Result<R, zbus::Error>
where
    B: serde::Serialize + zbus::DynamicType,
    R: for<'d> serde::Deserialize<'d> + zbus::Type,
{
    let reply = conn
        .call_method(Some(NAME), PATH, Some(iface), method, body)
        .await?;
    reply.body().deserialize::<R>()
}

/// The D-Bus error name of a failed call, or `"ok"`.
pub fn error_name<T>(r: &Result<T, zbus::Error>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => wcetd::client::error_name(e).unwrap_or_else(|| format!("not a D-Bus error: {e}")),
    }
}

/// Wait until `daemon` itself (by pid, not a predecessor that has not been reaped by the bus yet)
/// owns the name.
pub async fn wait_for_daemon(conn: &Connection, daemon: &mut Daemon) {
    use futures_util::StreamExt;
    let dbus = zbus::fdo::DBusProxy::new(conn).await.expect("DBus proxy");
    // Subscribe before the first check so an ownership change in between is not missed.
    let mut changes = dbus
        .receive_name_owner_changed()
        .await
        .expect("NameOwnerChanged");
    let name = zbus::names::BusName::try_from(NAME).unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(status) = daemon.child.try_wait().expect("try_wait") {
            panic!(
                "wcetd exited ({status}) before owning its name; log:\n{}",
                daemon.log_text()
            );
        }
        if dbus.name_has_owner(name.clone()).await.unwrap_or(false) {
            if let Ok(pid) = dbus.get_connection_unix_process_id(name.clone()).await {
                if pid == daemon.pid() {
                    return;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "wcetd did not own {NAME} in time; log:\n{}",
            daemon.log_text()
        );
        // Wake on the bus's name signal; the bounded wait only lets a dead daemon be noticed.
        let _ = tokio::time::timeout(Duration::from_millis(200), changes.next()).await;
    }
}

/// Wait for `job` to finish (on its `JobFinished` signal); returns (state, message).
pub async fn wait_for_job(conn: &Connection, job: u64) -> (String, String) {
    let calibration = wcetd::client::CalibrationProxy::new(conn)
        .await
        .expect("Calibration1 proxy");
    tokio::time::timeout(WAIT, wcetd::client::wait_for_job(&calibration, job, |_| {}))
        .await
        .unwrap_or_else(|_| panic!("job {job} did not finish in time"))
        .expect("job state")
}

pub type Curves = BTreeMap<String, Result<Vec<(u32, u64)>, String>>;

/// `GetCurve` of every listed kernel; a kernel without bounds maps to its error name.
pub async fn curves(conn: &Connection) -> Curves {
    let kernels: Vec<String> = call(conn, BOUNDS, "ListKernels", &())
        .await
        .expect("ListKernels");
    let mut out = Curves::new();
    for k in kernels {
        let r: Result<Vec<(u32, u64)>, zbus::Error> =
            call(conn, BOUNDS, "GetCurve", &(k.as_str(),)).await;
        out.insert(k, r.map_err(|e| error_name::<()>(&Err(e))));
    }
    out
}

pub async fn health(conn: &Connection) -> String {
    let props = zbus::fdo::PropertiesProxy::builder(conn)
        .destination(NAME)
        .path(PATH)
        .build()
        .await
        .expect("Properties proxy");
    let iface = zbus::names::InterfaceName::from_static_str_unchecked(BOUNDS);
    let v = props.get(iface, "Health").await.expect("Health");
    String::try_from(v).expect("Health is a string")
}

/// Files in `dir` whose names contain `needle`.
pub fn files_containing(dir: &Path, needle: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(needle))
                .collect()
        })
        .unwrap_or_default()
}

/// A state directory holding a complete calibration of the built-in suite (seed 1), made by a
/// daemon that has then been stopped; returns its curves.
pub async fn calibrate_state(fx: &Fixture) -> Curves {
    let conn = fx.connect().await;
    let mut d = Daemon::spawn(fx.address(), &fx.state(), &[]);
    wait_for_daemon(&conn, &mut d).await;
    let (state, message) = wait_for_job(&conn, 1).await;
    assert_eq!(state, "done", "initial calibration: {message}");
    let c = curves(&conn).await;
    assert!(
        c.values().all(Result::is_ok),
        "every kernel calibrated: {c:?}"
    );
    d.stop();
    c
}
