//! Support for the admission and client tests: a private `dbus-daemon` and the real `wcetd` on it
//! (simulated GPU). Waits are on the bus's own signals (name ownership, `JobFinished`) under a
//! deadline, never a fixed sleep.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wcetd::bus::PrivateBus;
use zbus::OwnedVariant;
use zbus::{Connection, DBusError};

pub const NAME: &str = "org.wcetd.Wcetd1";
pub const PATH: &str = "/org/wcetd/Wcetd1";
const DEADLINE: Duration = Duration::from_secs(30);
const CHILD_CHECK: Duration = Duration::from_millis(200);

/// A private bus and a state directory that daemons started from it share.
pub struct Env {
    pub bus: PrivateBus,
    pub state: PathBuf,
    pub dir: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Env {
        let dir = tempfile::tempdir().expect("temporary directory");
        let bus = PrivateBus::start(&dir.path().join("bus")).expect("private dbus-daemon");
        Env {
            bus,
            state: dir.path().join("state"),
            dir,
        }
    }

    /// Start `wcetd --backend sim` on this bus and state, and wait until it owns its name.
    pub async fn daemon(&self, extra: &[&str]) -> Daemon {
        self.daemon_writing_to(extra, Stdio::null()).await
    }

    /// [`Env::daemon`] with its standard output on `stdout`.
    pub async fn daemon_writing_to(&self, extra: &[&str], stdout: Stdio) -> Daemon {
        let child = Command::new(env!("CARGO_BIN_EXE_wcetd"))
            .args([
                "--backend",
                "sim",
                "--bus-address",
                self.bus.address(),
                "--state-dir",
            ])
            .arg(&self.state)
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(stdout)
            .spawn()
            .expect("starting wcetd");
        let mut daemon = Daemon {
            child,
            conn: self.connect().await,
        };
        daemon.wait_for_name().await;
        daemon
    }

    pub async fn connect(&self) -> Connection {
        zbus::connection::Builder::address(self.bus.address())
            .build()
            .await
            .expect("connecting to the private bus")
    }

    pub fn address(&self) -> &str {
        self.bus.address()
    }
}

/// A running `wcetd`, stopped with SIGTERM when dropped.
pub struct Daemon {
    child: Child,
    pub conn: Connection,
}

impl Daemon {
    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    async fn wait_for_name(&mut self) {
        use futures_util::StreamExt;
        let dbus = zbus::fdo::DBusProxy::new(&self.conn).await.unwrap();
        // Subscribe before the first check so a name taken in between is not missed.
        let mut changes = dbus.receive_name_owner_changed().await.unwrap();
        let start = Instant::now();
        loop {
            if dbus.name_has_owner(NAME.try_into().unwrap()).await.unwrap() {
                return;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("wcetd exited ({status}) before owning {NAME}");
            }
            assert!(
                start.elapsed() < DEADLINE,
                "wcetd did not own {NAME} within {DEADLINE:?}"
            );
            // Wake on the bus's name signal; the bounded wait only lets a dead daemon be noticed.
            let _ = tokio::time::timeout(CHILD_CHECK, changes.next()).await;
        }
    }

    /// Wait until `job` has finished (on its `JobFinished` signal), and insist that it succeeded.
    pub async fn wait_job(&self, job: u64) {
        let calibration = wcetd::client::CalibrationProxy::new(&self.conn)
            .await
            .expect("Calibration1 proxy");
        let (state, message) = tokio::time::timeout(
            DEADLINE,
            wcetd::client::wait_for_job(&calibration, job, |_| {}),
        )
        .await
        .unwrap_or_else(|_| panic!("job {job} did not finish within {DEADLINE:?}"))
        .expect("job state");
        assert_eq!(state, "done", "job {job} {state}: {message}");
    }

    /// Call a method of the daemon; a D-Bus error comes back as (error name, message).
    pub async fn call<B, R>(
        &self,
        interface: &str,
        method: &str,
        body: &B,
    ) -> Result<R, (String, String)>
    where
        B: serde::Serialize + zbus::zvariant::DynamicType,
        R: for<'d> zbus::zvariant::DynamicDeserialize<'d>,
    {
        let reply = self
            .conn
            .call_method(Some(NAME), PATH, Some(interface), method, body)
            .await;
        match reply {
            Ok(msg) => Ok(msg
                .body()
                .deserialize::<R>()
                .expect("reply of the expected type")),
            Err(zbus::Error::MethodError(name, message, _)) => {
                Err((name.to_string(), message.unwrap_or_default()))
            }
            // zbus turns org.freedesktop.DBus.Error.* replies into its own `fdo::Error`.
            Err(zbus::Error::FDO(e)) => Err((
                e.name().to_string(),
                e.description().unwrap_or_default().to_string(),
            )),
            Err(e) => panic!("calling {method}: {e}"),
        }
    }

    pub async fn bound(&self, kernel: &str, sms: u32) -> u64 {
        self.call("org.wcetd.Bounds1", "GetBound", &(kernel, sms))
            .await
            .unwrap()
    }

    pub async fn bound_info(&self, kernel: &str, sms: u32) -> HashMap<String, OwnedVariant> {
        self.call("org.wcetd.Bounds1", "GetBoundInfo", &(kernel, sms))
            .await
            .unwrap()
    }
}

impl Daemon {
    /// SIGTERM, and how the daemon exited.
    pub fn stop(mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.child.wait().expect("waiting for wcetd")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SIGTERM lets the daemon release its name; it exits within moments, so waiting is bounded.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// An isolated daemon that has finished its start-up calibration (job 1).
pub async fn calibrated(env: &Env, extra: &[&str]) -> Daemon {
    let d = env.daemon(extra).await;
    d.wait_job(1).await;
    d
}

/// `wcetctl --bus-address ADDRESS ARGS`: (exit code, stdout, stderr).
pub fn wcetctl(address: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_wcetctl"))
        .args(["--bus-address", address])
        .args(args)
        .output()
        .expect("running wcetctl");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}
