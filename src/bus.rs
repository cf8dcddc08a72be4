//! How the daemon and its clients reach a bus: an address given on the command line, the system
//! bus, the session bus, or, when none is reachable, a private `dbus-daemon` the daemon starts as
//! its child. The private bus's address is printed and written to `<state-dir>/bus-address` so
//! `wcetctl` on the same machine finds it without flags.

use anyhow::{bail, Context};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The well-known name the daemon owns (the design notes fix it).
pub const BUS_NAME: &str = "org.wcetd.Wcetd1";
/// The object of the default GPU, and the root of the per-GPU objects.
pub const OBJECT_PATH: &str = "/org/wcetd/Wcetd1";

/// The object of GPU `index` when the daemon serves several.
pub fn device_path(index: u32) -> String {
    format!("{OBJECT_PATH}/gpu/{index}")
}

/// Own [`BUS_NAME`] for as long as the connection lives: without `ALLOW_REPLACEMENT` (zbus's
/// default sets it, so any client on the bus could take the name from a running daemon and
/// answer in its place) and without queueing behind another owner.
pub async fn own_name(conn: &zbus::Connection) -> anyhow::Result<()> {
    use zbus::fdo::{RequestNameFlags, RequestNameReply};
    let taken = |how: &str| {
        anyhow::anyhow!(
            "{BUS_NAME} is owned by another connection ({how}): is another wcetd running on this bus? accepted: one wcetd per bus (give this one --bus-address, or stop the other)"
        )
    };
    // zbus answers a taken name with `NameTaken` itself (DO_NOT_QUEUE's `Exists` reply).
    match conn
        .request_name_with_flags(BUS_NAME, RequestNameFlags::DO_NOT_QUEUE)
        .await
    {
        Ok(RequestNameReply::PrimaryOwner | RequestNameReply::AlreadyOwner) => Ok(()),
        Ok(other) => Err(taken(&format!("{other:?}"))),
        Err(zbus::Error::NameTaken) => Err(taken("the name is taken")),
        Err(e) => Err(e).with_context(|| format!("owning {BUS_NAME}")),
    }
}

/// Resolves, with what happened, when this connection no longer owns [`BUS_NAME`]: the bus said
/// so, or the connection to it ended (subscribe before owning it; it cannot be taken, so only
/// the bus itself can end the ownership).
pub async fn name_lost(
    conn: &zbus::Connection,
) -> anyhow::Result<impl std::future::Future<Output = String>> {
    use futures_util::StreamExt;
    let proxy = zbus::fdo::DBusProxy::new(conn).await?;
    let mut lost = proxy.receive_name_lost().await?;
    Ok(async move {
        while let Some(signal) = lost.next().await {
            if signal.args().is_ok_and(|a| a.name.as_str() == BUS_NAME) {
                return format!("the bus took {BUS_NAME} from this daemon");
            }
        }
        // The stream ends with the connection: the name is gone with it.
        format!("the connection to the bus ended (the bus stopped?), and {BUS_NAME} with it")
    })
}

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
        remove_dead_siblings(dir);
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let socket = dir.join("bus");
        let _ = std::fs::remove_file(&socket);
        let config = dir.join("bus.conf");
        std::fs::write(&config, bus_config(&socket))
            .with_context(|| format!("writing {}", config.display()))?;
        let mut command = Command::new("dbus-daemon");
        // Its own process group: a signal to the daemon's group (Ctrl-C in a terminal, `timeout`)
        // reaches the daemon alone, which then shuts down in order and stops the bus itself.
        {
            use std::os::unix::process::CommandExt;
            command.process_group(0);
        }
        // The bus ends with the daemon however the daemon ends (SIGKILL included): asked of the
        // kernel in the child before exec. The thread that starts it is the one that runs the
        // daemon's main future, which lives as long as the process.
        // And a reader of the standard error it shares with the daemon that has gone (`wcetd
        // 2>&1 | head -1`) costs it its warnings, not its life: with SIGPIPE at its default, its
        // first warning killed it, and the daemon exited for the lost bus (a review found it).
        // SAFETY: prctl and signal are async-signal-safe and touch no memory of the parent.
        unsafe {
            use std::os::unix::process::CommandExt;
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                libc::signal(libc::SIGPIPE, libc::SIG_IGN);
                Ok(())
            });
        }
        let mut child = command
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

/// Private-bus directories beside `dir` (`wcetd-<pid>`, as the daemon names them) whose process
/// is gone: a daemon killed outright could not remove its own. Only the two files a bus leaves
/// are removed, then the directory if that emptied it.
fn remove_dead_siblings(dir: &Path) {
    let Some(parent) = dir.parent() else { return };
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("wcetd-")
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: signal 0 only asks whether the process exists; nothing is sent.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone && entry.path() != dir {
            let _ = std::fs::remove_file(entry.path().join("bus"));
            let _ = std::fs::remove_file(entry.path().join("bus.conf"));
            if std::fs::remove_dir(entry.path()).is_ok() {
                tracing::info!(dir = %entry.path().display(), "removed the private bus directory of a daemon that is gone");
            }
        }
    }
}

/// The private bus's policy: any local user may connect and call (operator methods are checked by
/// the daemon itself), only the daemon's user may own the daemon's name, nobody may own another
/// name or eavesdrop. (Allowing any owner let any local user stand in for the daemon.)
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
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
    <deny own="*"/>
  </policy>
  <policy user="{}">
    <allow own="{BUS_NAME}"/>
  </policy>
</busconfig>
"#,
        escape_address_value(socket),
        // SAFETY: getuid cannot fail and touches no memory.
        unsafe { libc::getuid() }
    )
}

/// `path` as a value in a D-Bus address: bytes outside `[-0-9A-Za-z_/.\*]` as `%XX` (the
/// specification's escaping), so that a runtime directory with a space, comma or `=` still
/// names the socket, and the result is plain text in the XML configuration too.
fn escape_address_value(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::new();
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"-_/.\\*".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02x}"));
        }
    }
    out
}

/// The socket path of a `unix:path=...` address (its first), with %-escapes undone; `None` for
/// any other address, or a malformed escape.
fn unix_path_of(address: &str) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    let first = address.split(';').next()?;
    let options = first.strip_prefix("unix:")?;
    let value = options.split(',').find_map(|kv| kv.strip_prefix("path="))?;
    let mut bytes = Vec::new();
    let mut rest = value.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    Some(PathBuf::from(std::ffi::OsString::from_vec(bytes)))
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

/// How long a method call waits for its answer: `$WCETD_CALL_TIMEOUT_S` seconds (a positive
/// whole number), else a minute. Without a limit a client of a stopped (SIGSTOP) or hung daemon
/// waited forever, and a scheduler's `wcetctl admit` with it; every call the daemon answers is
/// bounded work (admission stops at its work budget, imports are checked and queued), so a
/// minute is far above any answer and only a daemon that is not answering meets it.
pub fn call_timeout() -> std::time::Duration {
    call_timeout_set().unwrap_or(std::time::Duration::from_secs(60))
}

/// `$WCETD_CALL_TIMEOUT_S` as [`call_timeout`] takes it (a minute where it is not set), or what
/// is wrong with it: a client says so rather than wait a minute where `abc` or `-1` was meant to
/// be something else.
pub fn call_timeout_set() -> Result<std::time::Duration, String> {
    let text = std::env::var_os("WCETD_CALL_TIMEOUT_S").unwrap_or_default();
    if text.is_empty() {
        return Ok(std::time::Duration::from_secs(60));
    }
    text.to_str()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|&s| s > 0)
        .map(std::time::Duration::from_secs)
        .ok_or_else(|| {
            format!(
                "$WCETD_CALL_TIMEOUT_S is {text:?}; accepted: a positive whole number of seconds (unset or empty: 60)"
            )
        })
}

/// A plain client connection to `choice`, its method calls limited to [`call_timeout`].
pub async fn connect(choice: &BusChoice) -> anyhow::Result<zbus::Connection> {
    let builder = match choice {
        // zbus takes a unix path as written, without undoing the address's %-escapes (which a
        // private bus in a directory with a space or a comma needs): the socket is opened here.
        BusChoice::Address(a) if a.contains('%') && unix_path_of(a).is_some() => {
            let path = unix_path_of(a).unwrap_or_default();
            let stream = std::os::unix::net::UnixStream::connect(&path)
                .with_context(|| format!("connecting to {}", path.display()))?;
            zbus::connection::Builder::unix_stream(stream)
        }
        BusChoice::Address(a) => zbus::connection::Builder::address(a.as_str()),
        BusChoice::System => zbus::connection::Builder::system(),
        BusChoice::Session => zbus::connection::Builder::session(),
        BusChoice::Auto => {
            if std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some() {
                let session = zbus::connection::Builder::session();
                if let Ok(c) = session.method_timeout(call_timeout()).build().await {
                    return Ok(c);
                }
            }
            zbus::connection::Builder::system()
        }
    };
    // The handshake is bounded as a call is: a socket that accepts and never answers held a
    // client for ever, and `watch` with it, whatever WCETD_CALL_TIMEOUT_S said (a review found).
    let limit = call_timeout();
    match tokio::time::timeout(limit, builder.method_timeout(limit).build()).await {
        Ok(built) => built.with_context(|| format!("connecting to {choice}")),
        Err(_) => anyhow::bail!(
            "connecting to {choice}: no answer within {} s (a bus that accepts but does not speak)",
            limit.as_secs()
        ),
    }
}
