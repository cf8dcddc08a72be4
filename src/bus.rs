//! How the daemon and its clients reach a bus: an address given on the command line, the system
//! bus, the session bus, or, when none is reachable, a private `dbus-daemon` the daemon starts as
//! its child. The private bus's address is printed and written to `<state-dir>/bus-address` so
//! `wcetctl` on the same machine finds it without flags.

use anyhow::{bail, Context};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Which bus to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BusChoice {
    Address(String),
    System,
    Session,
    /// The session bus if there is one, else the system bus, else a private bus.
    Auto,
}

impl std::fmt::Display for BusChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BusChoice::Address(a) => write!(f, "address {a}"),
            BusChoice::System => f.write_str("the system bus"),
            BusChoice::Session => f.write_str("the session bus"),
            BusChoice::Auto => f.write_str("the session bus, else the system bus"),
        }
    }
}

/// A `dbus-daemon` child on a private socket, stopped when dropped.
pub struct PrivateBus {
    child: Child,
    address: String,
    dir: PathBuf,
}

impl PrivateBus {
    /// Start `dbus-daemon` listening in `dir` (created if needed). Any local user may connect;
    /// operator methods are protected by the daemon's own access check, not by the socket.
    pub fn start(dir: &Path) -> anyhow::Result<PrivateBus> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let socket = dir.join("bus");
        let _ = std::fs::remove_file(&socket);
        let config = dir.join("bus.conf");
        std::fs::write(&config, bus_config(&socket))
            .with_context(|| format!("writing {}", config.display()))?;
        let mut child = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--print-address"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context(
                "starting dbus-daemon (install the `dbus` package, e.g. `apt-get install -y dbus`)",
            )?;
        let stdout = child.stdout.take().context("dbus-daemon stdout")?;
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .context("reading the private bus address")?;
        let address = line.trim().to_string();
        if address.is_empty() {
            let _ = child.kill();
            bail!("dbus-daemon exited without printing an address");
        }
        Ok(PrivateBus {
            child,
            address,
            dir: dir.to_path_buf(),
        })
    }

    pub fn address(&self) -> &str {
        &self.address
    }
}

impl Drop for PrivateBus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(self.dir.join("bus"));
        let _ = std::fs::remove_file(self.dir.join("bus.conf"));
        // Only if nothing else was put there: the directory is this process's (its pid).
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn bus_config(socket: &Path) -> String {
    format!(
        r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"#,
        socket.display()
    )
}

/// The file where the daemon records the address of its private bus.
pub fn address_file(state_dir: &Path) -> PathBuf {
    state_dir.join("bus-address")
}

/// The address a client should use: explicit, then `$WCETD_BUS_ADDRESS`, then the daemon's
/// private bus recorded in `state_dir`, then the session bus, then the system bus.
pub fn client_address(explicit: Option<&str>, state_dir: &Path) -> BusChoice {
    if let Some(a) = explicit {
        return BusChoice::Address(a.to_string());
    }
    if let Some(a) = std::env::var_os("WCETD_BUS_ADDRESS").filter(|a| !a.is_empty()) {
        return BusChoice::Address(a.to_string_lossy().into_owned());
    }
    if let Ok(a) = std::fs::read_to_string(address_file(state_dir)) {
        if !a.trim().is_empty() {
            return BusChoice::Address(a.trim().to_string());
        }
    }
    BusChoice::Auto
}

/// A plain client connection to `choice`.
pub async fn connect(choice: &BusChoice) -> anyhow::Result<zbus::Connection> {
    let builder = match choice {
        BusChoice::Address(a) => zbus::connection::Builder::address(a.as_str()),
        BusChoice::System => zbus::connection::Builder::system(),
        BusChoice::Session => zbus::connection::Builder::session(),
        BusChoice::Auto => {
            if std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some() {
                if let Ok(c) = zbus::connection::Builder::session().build().await {
                    return Ok(c);
                }
            }
            zbus::connection::Builder::system()
        }
    };
    builder
        .build()
        .await
        .with_context(|| format!("connecting to {choice}"))
}
