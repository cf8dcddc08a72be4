//! Test support: a private `dbus-daemon` on a socket in a temporary directory, the real `wcetd`
//! binary on it (simulated GPU), and a client connection. Waits on bus names and job signals,
//! never on sleeps.

#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wcetd::bus::PrivateBus;
use wcetd::client::{BoundsProxy, CalibrationProxy};

pub const WAIT: Duration = Duration::from_secs(60);

pub struct Daemon {
    pub child: Child,
    pub bus: PrivateBus,
    pub dir: tempfile::TempDir,
    pub conn: zbus::Connection,
}

impl Daemon {
    /// Start a bus and `wcetd --backend sim` on it with `extra` flags; wait until it owns its name.
    pub async fn start(extra: &[&str]) -> Daemon {
        let dir = tempfile::tempdir().expect("tempdir");
        let bus = PrivateBus::start(&dir.path().join("bus")).expect("private dbus-daemon");
        let child = spawn_wcetd(bus.address(), &dir.path().join("state"), extra);
        let conn = zbus::connection::Builder::address(bus.address())
            .build()
            .await
            .expect("client connection");
        let mut daemon = Daemon {
            child,
            bus,
            dir,
            conn,
        };
        daemon.wait_for_name().await;
        daemon
    }

    pub fn state_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("state")
    }

    /// Block until `org.wcetd.Wcetd1` has an owner, or the daemon dies (then panic with why).
    pub async fn wait_for_name(&mut self) {
        use futures_util::StreamExt;
        let dbus = zbus::fdo::DBusProxy::new(&self.conn).await.unwrap();
        let mut changes = dbus.receive_name_owner_changed().await.unwrap();
        let name = zbus::names::BusName::try_from(wcetd::bus::BUS_NAME).unwrap();
        let deadline = Instant::now() + WAIT;
        while !dbus.name_has_owner(name.clone()).await.unwrap() {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("wcetd exited before owning its name: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "wcetd did not own its name in time"
            );
            let _ = tokio::time::timeout(Duration::from_millis(200), changes.next()).await;
        }
    }

    pub async fn bounds(&self) -> BoundsProxy<'static> {
        BoundsProxy::new(&self.conn).await.unwrap()
    }

    pub async fn calibration(&self) -> CalibrationProxy<'static> {
        CalibrationProxy::new(&self.conn).await.unwrap()
    }

    /// Wait for `job` to finish; returns (state, message).
    pub async fn wait_job(&self, job: u64) -> (String, String) {
        let cal = self.calibration().await;
        tokio::time::timeout(WAIT, wcetd::client::wait_for_job(&cal, job, |_| {}))
            .await
            .expect("job did not finish in time")
            .expect("job state")
    }

    /// Recalibrate `kernels` and wait for the job; returns (state, message).
    pub async fn recalibrate(&self, kernels: &[&str]) -> (String, String) {
        let job = self.calibration().await.recalibrate(kernels).await.unwrap();
        self.wait_job(job).await
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn spawn_wcetd(address: &str, state: &std::path::Path, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_wcetd"))
        .args(["--backend", "sim", "--bus-address", address, "--state-dir"])
        .arg(state)
        .args(["--launches", "120"])
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("starting wcetd")
}

/// `wcetctl` with the bus address set; returns (status ok, stdout, stderr).
pub fn wcetctl(address: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_wcetctl"))
        .args(["--bus-address", address])
        .args(args)
        .output()
        .expect("running wcetctl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// The D-Bus error name of a failed call.
pub fn error_name(e: &zbus::Error) -> String {
    wcetd::client::error_name(e).unwrap_or_else(|| format!("not a method error: {e}"))
}
