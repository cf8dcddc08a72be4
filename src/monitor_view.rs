//! The client side of `wcetctl observed` and `wcetctl watch`: what production reported
//! (`org.wcetd.Monitor1`), as tables beside the bounds. `watch` refreshes like `top` on a terminal
//! and prints one snapshot after another (or one, with `--once`) when its output is not one.

use anyhow::Context;
use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::Duration;
use zbus::{Connection, OwnedVariant};

use crate::client::BoundsProxy;
use crate::monitor_bus::Monitor1Proxy;

/// One row: a (kernel, size) and what `GetObserved` said of it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Row {
    pub kernel: String,
    pub sms: u32,
    pub count: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
    pub bound_ns: u64,
    pub headroom_ns: i64,
    pub overruns: u64,
    /// Of `overruns`, those carried in from a recalibration (`GetObserved`'s `carried`). `None`
    /// in `watch`: its flat list (`ListObserved`) does not carry it, and a 0 in its place would
    /// read as a value; `observed` gives it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub carried: Option<u64>,
    pub overruns_total: u64,
    /// The highest reported time that bounds this size (`GetObserved`'s `floor_ns`). `None` in
    /// `watch`, as `carried`: one `GetObserved` per series would make a refresh cost a call per
    /// series, and thousands of series are expected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floor_ns: Option<u64>,
}

impl Row {
    fn from_dict(kernel: &str, sms: u32, d: &HashMap<String, OwnedVariant>) -> Row {
        let t = |k: &str| d.get(k).and_then(|v| u64::try_from(v).ok()).unwrap_or(0);
        Row {
            kernel: kernel.to_string(),
            sms,
            count: t("count"),
            p50_ns: t("p50_ns"),
            p99_ns: t("p99_ns"),
            p999_ns: t("p999_ns"),
            max_ns: t("max_ns"),
            bound_ns: t("bound_ns"),
            headroom_ns: d
                .get("headroom_ns")
                .and_then(|v| i64::try_from(v).ok())
                .unwrap_or(0),
            overruns: t("overruns"),
            carried: Some(t("carried")),
            overruns_total: t("overruns_total"),
            floor_ns: Some(t("floor_ns")),
        }
    }

    fn from_wire(w: crate::monitor_bus::WireObserved) -> Row {
        let (
            kernel,
            sms,
            count,
            p50_ns,
            p99_ns,
            p999_ns,
            max_ns,
            bound_ns,
            overruns,
            overruns_total,
        ) = w;
        let wide = i128::from(bound_ns) - i128::from(max_ns);
        Row {
            kernel,
            sms,
            count,
            p50_ns,
            p99_ns,
            p999_ns,
            max_ns,
            bound_ns,
            headroom_ns: i64::try_from(wide).unwrap_or(if wide < 0 { i64::MIN } else { i64::MAX }),
            overruns,
            carried: None,
            overruns_total,
            floor_ns: None,
        }
    }

    /// Headroom as a share of the bound, in percent; none without a bound (it read 0.0%, as if
    /// a time sat exactly on a bound).
    fn headroom_pct(&self) -> Option<f64> {
        (self.bound_ns > 0).then(|| 100.0 * self.headroom_ns as f64 / self.bound_ns as f64)
    }
}

/// A bus error as the daemon phrased it.
fn explain(e: zbus::Error) -> anyhow::Error {
    let name = crate::client::error_name(&e);
    match (&e, name) {
        (zbus::Error::MethodError(_, Some(msg), _), Some(name)) => {
            anyhow::anyhow!("{msg} ({name})")
        }
        (zbus::Error::FDO(f), Some(name)) => {
            anyhow::anyhow!(
                "{} ({name})",
                zbus::DBusError::description(&**f).unwrap_or("")
            )
        }
        _ => anyhow::anyhow!(e),
    }
}

/// `GetObserved` of `kernel` at `sms`, or at every realisable size.
/// The device is the object at `path` (`/org/wcetd/Wcetd1` or one GPU's).
pub async fn observed(
    conn: &Connection,
    path: &str,
    kernel: &str,
    sms: Option<u32>,
) -> anyhow::Result<Vec<Row>> {
    let monitor = monitor_at(conn, path)
        .await
        .context("reaching org.wcetd.Monitor1")?;
    let sizes = match sms {
        Some(m) => vec![m],
        None => {
            let bounds = BoundsProxy::builder(conn)
                .path(path)
                .cache_properties(zbus::proxy::CacheProperties::No)
                .build()
                .await?;
            bounds.partition_sizes().await?
        }
    };
    let mut rows = Vec::new();
    for m in sizes {
        let d = monitor.get_observed(kernel, m).await.map_err(explain)?;
        let partition = d
            .get("partition_sms")
            .and_then(|v| u32::try_from(v).ok())
            .unwrap_or(m);
        rows.push(Row::from_dict(kernel, partition, &d));
    }
    Ok(rows)
}

/// `Monitor1` of the object at `path`.
pub async fn monitor_at(conn: &Connection, path: &str) -> zbus::Result<Monitor1Proxy<'static>> {
    Monitor1Proxy::builder(conn)
        .path(path.to_string())
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
}

/// Every (kernel, size) with reported times on the object at `path`, the least headroom first.
pub async fn snapshot(conn: &Connection, path: &str) -> anyhow::Result<Vec<Row>> {
    let monitor = monitor_at(conn, path).await?;
    let mut rows: Vec<Row> = monitor
        .list_observed()
        .await
        .map_err(explain)?
        .into_iter()
        .map(Row::from_wire)
        .collect();
    rows.sort_by(|a, b| {
        // No bound at all sorts first: nothing holds those times yet.
        let least = |r: &Row| r.headroom_pct().unwrap_or(f64::NEG_INFINITY);
        least(a)
            .total_cmp(&least(b))
            .then_with(|| (&a.kernel, a.sms).cmp(&(&b.kernel, b.sms)))
    });
    Ok(rows)
}

/// The table `observed` and `watch` print, of `rows`; `with_floor` adds `floor_ns`, the highest
/// reported time that bounds the size (at it, or at a larger size of a monotone kernel), which
/// `GetObserved` has and `watch`'s flat list does not.
pub fn render(rows: &[Row], with_floor: bool) -> String {
    let width = rows
        .iter()
        .map(|r| r.kernel.len())
        .max()
        .unwrap_or(6)
        .max(6);
    let floor = |v: &dyn std::fmt::Display| {
        if with_floor {
            format!(" {v:>11}")
        } else {
            String::new()
        }
    };
    let mut out = format!(
        "{:<width$} {:>5} {:>9} {:>11} {:>11} {:>11} {:>11} {:>11}{} {:>12} {:>8} {:>8}\n",
        "kernel",
        "SMs",
        "count",
        "p50_ns",
        "p99_ns",
        "p999_ns",
        "max_ns",
        "bound_ns",
        floor(&"floor_ns"),
        "headroom_ns",
        "headroom",
        "overruns"
    );
    for r in rows {
        let mark = if r.overruns > 0 { " !" } else { "" };
        out += &format!(
            "{:<width$} {:>5} {:>9} {:>11} {:>11} {:>11} {:>11} {:>11}{} {:>12} {:>8} {:>8}{mark}\n",
            r.kernel,
            r.sms,
            r.count,
            r.p50_ns,
            r.p99_ns,
            r.p999_ns,
            r.max_ns,
            r.bound_ns,
            floor(&r.floor_ns.map_or("-".to_string(), |f| f.to_string())),
            r.headroom_ns,
            r.headroom_pct().map_or("-".to_string(), |p| format!("{p:.1}%")),
            r.overruns
        );
    }
    out
}

/// `wcetctl watch`: refresh every `interval` until interrupted, or `count` times; on a terminal
/// the screen is redrawn in place, otherwise snapshots follow one another.
pub async fn watch<F, Fut>(
    conn: &Connection,
    path: &str,
    (interval, count): (Duration, Option<u64>),
    json: bool,
    mut reconnect: F,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Connection>>,
{
    let mut conn = conn.clone();
    let tty = std::io::stdout().is_terminal() && !json;
    let mut shown = 0u64;
    let mut just_reconnected = false;
    loop {
        let (rows, overrun) = match observed_and_overrun(&conn, path).await {
            Ok(both) => both,
            // A daemon restarting (systemd takes a second or two) is waited for, as top waits:
            // the view ended with a raw D-Bus error. A private bus goes with its daemon, and
            // the restarted one records another: found again where it was found first (the
            // view ended with "Broken pipe", a black-box hunt found). Once, before a waiting
            // line: a bus found again that fails at once is waited for as any other.
            Err(e) if daemon_gone(&e) || bus_gone(&e) => {
                if bus_gone(&e) && !std::mem::take(&mut just_reconnected) {
                    if let Ok(again) = reconnect().await {
                        conn = again;
                        just_reconnected = true;
                        continue;
                    }
                }
                say_waiting_for_the_daemon(json, &e)?;
                // Counted, so that `--count N` ends even if the daemon never comes back.
                shown += 1;
                if count.is_some_and(|c| shown >= c) {
                    return Err(e.context("the daemon left the bus and did not come back"));
                }
                tokio::time::sleep(interval).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        // Home and clear on a terminal, as top redraws; otherwise a blank line parts snapshots.
        let before = if tty {
            "\x1b[H\x1b[2J"
        } else if shown > 0 {
            "\n"
        } else {
            ""
        };
        show_refresh(json, before, &rows, &overrun)?;
        just_reconnected = false;
        shown += 1;
        if count.is_some_and(|c| shown >= c) {
            return Ok(());
        }
        tokio::time::sleep(interval).await;
    }
}

/// One refresh's answers: every observed series (`ListObserved`), then the kernels overrun
/// since calibration.
async fn observed_and_overrun(
    conn: &Connection,
    path: &str,
) -> anyhow::Result<(Vec<Row>, Vec<String>)> {
    let monitor = monitor_at(conn, path).await?;
    let rows = snapshot(conn, path).await?;
    let overrun = monitor.overrun_kernels().await.map_err(explain)?;
    Ok((rows, overrun))
}

/// In place of a refresh: the daemon is not on the bus, and `watch` waits for it.
fn say_waiting_for_the_daemon(json: bool, e: &anyhow::Error) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let now = chrono::Utc::now();
    if json {
        let v = serde_json::json!({"time": now.to_rfc3339(), "error": format!("{e:#}")});
        writeln!(out, "{v}")?;
    } else {
        writeln!(
            out,
            "{}: no wcetd on the bus (restarting?); waiting for it",
            now.format("%Y-%m-%d %H:%M:%S UTC")
        )?;
    }
    out.flush()?;
    Ok(())
}

/// One refresh of `watch`: a JSON line, or the table (after `before`) of every series under
/// a line that names the kernels overrun.
fn show_refresh(json: bool, before: &str, rows: &[Row], overrun: &[String]) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        let v = serde_json::json!({"time": chrono::Utc::now().to_rfc3339(), "overrun_kernels": overrun, "observed": rows});
        writeln!(out, "{v}")?;
    } else {
        write!(out, "{before}")?;
        writeln!(
            out,
            "wcetd observations at {} ({} series); overruns since calibration: {}",
            chrono::Utc::now().format("%Y-%m-%d %H:%M:%S UTC"),
            rows.len(),
            if overrun.is_empty() {
                "none".to_string()
            } else {
                overrun.join(", ")
            }
        )?;
        write!(out, "{}", render(rows, false))?;
        if rows.is_empty() {
            writeln!(out, "(no launch times reported yet: Monitor1.Report)")?;
        }
    }
    out.flush()?;
    Ok(())
}

/// Whether `e` says the connection to the bus itself is gone (the bus ended: a private bus
/// ends with its daemon), not that the bus answered, nor that the daemon did not in time (zbus
/// reports that as an I/O error too, `TimedOut`: taken for a lost bus, a stopped daemon kept
/// `watch` reconnecting to its live bus forever without a line; a review found it).
fn bus_gone(e: &anyhow::Error) -> bool {
    use std::io::ErrorKind::{
        BrokenPipe, ConnectionAborted, ConnectionReset, NotConnected, UnexpectedEof,
    };
    let gone = |io: &std::io::Error| {
        matches!(
            io.kind(),
            BrokenPipe | ConnectionReset | ConnectionAborted | NotConnected | UnexpectedEof
        )
    };
    e.chain().any(|c| {
        c.downcast_ref::<zbus::Error>()
            .is_some_and(|z| matches!(z, zbus::Error::InputOutput(io) if gone(io)))
            || c.downcast_ref::<std::io::Error>().is_some_and(gone)
    })
}

/// Whether `e` says nobody owns the daemon's name (it stopped, or is restarting).
fn daemon_gone(e: &anyhow::Error) -> bool {
    let text = format!("{e:#}");
    [
        "ServiceUnknown",
        "NameHasNoOwner",
        "was not provided by any .service files",
    ]
    .iter()
    .any(|s| text.contains(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_without_a_bound_shows_no_headroom_share() {
        let row = |bound_ns: u64, max_ns: u64| Row {
            kernel: "bfs".into(),
            sms: 64,
            count: 1,
            p50_ns: max_ns,
            p99_ns: max_ns,
            p999_ns: max_ns,
            max_ns,
            bound_ns,
            headroom_ns: bound_ns as i64 - max_ns as i64,
            overruns: 0,
            carried: None,
            overruns_total: 0,
            floor_ns: None,
        };
        let table = render(&[row(200_000, 100_000), row(0, 100_000)], false);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[1].contains("50.0%"), "{table}");
        assert!(
            lines[2].contains("-100000") && lines[2].contains(" - "),
            "{table}"
        );
    }
}
