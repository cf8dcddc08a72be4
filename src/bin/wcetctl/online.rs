//! Commands that talk to the daemon over the bus: bounds, curves, jobs, recalibration, imports,
//! exports, observations and status.

use super::*;

pub(crate) async fn online(cli: Cli) -> anyhow::Result<()> {
    check_input_files(&cli.command)?;
    let state_dir = cli
        .state_dir
        .clone()
        .unwrap_or_else(store::default_state_dir);
    let conn = reach_daemon(cli.bus_address.as_deref(), &state_dir).await?;
    let bounds = bounds_proxy(&conn).await?;
    let json = cli.json;
    match cli.command {
        Command::List => print_list(json, bounds.list_kernels().await.map_err(explain)?),
        Command::Bound {
            kernel,
            sms,
            interference,
        } => print_bound(json, &bounds, &kernel, sms, interference).await,
        Command::Curve {
            kernel,
            interference,
        } => print_curve(json, &bounds, &kernel, interference).await,
        Command::MinPartition {
            kernel,
            deadline_ns,
        } => min_partition(json, &bounds, &kernel, deadline_ns).await,
        Command::Recalibrate {
            kernels,
            interference,
            no_wait,
        } => recalibrate(json, &conn, &kernels, &interference, no_wait).await,
        Command::Jobs => jobs(json, &conn).await,
        Command::Cancel { job } => cancel(json, &conn, job).await,
        Command::Import {
            samples,
            geometry,
            interference,
            source,
        } => {
            let set = read_samples(&samples)?;
            let geometry = read_geometry(geometry.as_deref())?;
            let source = source.unwrap_or_else(|| default_source(&samples));
            import(json, &conn, &set, &geometry, interference, &source).await
        }
        Command::Kernels {
            action: KernelsAction::Reload,
        } => reload_kernels(json, &conn).await,
        Command::Export { kernels } => export(&conn, &kernels).await,
        Command::Observed { kernel, sms } => observed(json, &conn, &kernel, sms).await,
        Command::Report {
            kernel,
            sms,
            times_ns,
            interference,
        } => report(json, &conn, &kernel, sms, &times_ns, interference).await,
        Command::Watch {
            interval,
            once,
            count,
        } => {
            let count = if once { Some(1) } else { count };
            let explicit = cli.bus_address.as_deref();
            let found_on = bus_found_on(&conn, explicit, &state_dir).await;
            let again = || reach_the_same_bus(explicit, &state_dir, &found_on);
            watch(json, &conn, (interval, count), again).await
        }
        Command::ImportCalibration { file, force } => {
            import_calibration(json, &conn, &file, force).await
        }
        Command::Status => status_all(json, &conn, &bounds).await,
        Command::Admit {
            file,
            shared,
            accept,
        } => admit(json, &conn, &file, shared, accept).await,
        Command::Suggest { file, accept } => suggest(json, &conn, &file, accept).await,
        Command::Predict {
            kernel,
            device: None,
            sizes,
        } => predicted_by_daemon(json, &bounds, &kernel, &sizes).await,
        _ => unreachable!("offline commands are handled before connecting"),
    }
}

/// The fewest SMs whose bound meets `deadline_ns`, with that bound.
pub(crate) async fn min_partition(
    json: bool,
    bounds: &BoundsProxy<'_>,
    kernel: &str,
    deadline_ns: u64,
) -> anyhow::Result<()> {
    let sms = bounds
        .min_partition(kernel, deadline_ns)
        .await
        .map_err(explain)?;
    let bound = bounds.get_bound(kernel, sms).await.map_err(explain)?;
    if json {
        println!(
            "{}",
            serde_json::json!({"kernel": kernel, "deadline_ns": deadline_ns, "sms": sms, "bound_ns": bound})
        );
    } else {
        println!("{kernel}: {sms} SMs (bound {bound} ns <= deadline {deadline_ns} ns)");
    }
    Ok(())
}

pub(crate) async fn cancel(json: bool, conn: &zbus::Connection, job: u64) -> anyhow::Result<()> {
    calibration_proxy(conn)
        .await?
        .cancel_job(job)
        .await
        .map_err(explain)?;
    if json {
        println!("{}", serde_json::json!({"job": job, "cancel": "requested"}));
    } else {
        let wcetctl = command();
        println!("job {job}: cancellation requested; what it has not yet published stays as it was (`{wcetctl} jobs` says what it published before)");
    }
    Ok(())
}

/// The bundle of `kernels` (every calibrated one when empty) on standard output.
pub(crate) async fn export(conn: &zbus::Connection, kernels: &[String]) -> anyhow::Result<()> {
    let names: Vec<&str> = kernels.iter().map(String::as_str).collect();
    let bundle = calibration_proxy(conn)
        .await?
        .export_calibration(&names)
        .await
        .map_err(explain)?;
    println!("{bundle}");
    Ok(())
}

pub(crate) async fn observed(
    json: bool,
    conn: &zbus::Connection,
    kernel: &str,
    sms: Option<u32>,
) -> anyhow::Result<()> {
    let rows = wcetd::monitor_view::observed(conn, object(), kernel, sms).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print!("{}", wcetd::monitor_view::render(&rows, true));
    }
    Ok(())
}

/// `wcetctl report`: the times, then what the bound is now and the largest time reported there.
async fn report(
    json: bool,
    conn: &zbus::Connection,
    kernel: &str,
    sms: u32,
    times_ns: &[u64],
    interference: Option<Interference>,
) -> anyhow::Result<()> {
    let monitor = wcetd::monitor_view::monitor_at(conn, object()).await?;
    match interference {
        None => monitor.report(kernel, sms, times_ns).await,
        Some(tag) => {
            monitor
                .report_tagged(kernel, sms, &tag.to_string(), times_ns)
                .await
        }
    }
    .map_err(explain)?;
    let rows = wcetd::monitor_view::observed(conn, object(), kernel, Some(sms)).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        let plural = if times_ns.len() == 1 { "" } else { "s" };
        println!(
            "reported {} launch time{plural} of {kernel} at {sms} SMs",
            times_ns.len()
        );
        print!("{}", wcetd::monitor_view::render(&rows, true));
    }
    Ok(())
}

/// `wcetctl watch`, finding the daemon again with `reconnect` when its bus goes (a private bus
/// goes with its daemon).
pub(crate) async fn watch<F, Fut>(
    json: bool,
    conn: &zbus::Connection,
    (interval, count): (f64, Option<u64>),
    reconnect: F,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<zbus::Connection>>,
{
    if !(interval.is_finite() && interval > 0.0) {
        bail!("--interval {interval}; accepted: seconds above 0");
    }
    if count == Some(0) {
        bail!("--count 0; accepted: 1 or more snapshots (or no --count: until interrupted)");
    }
    let every = std::time::Duration::from_secs_f64(interval);
    wcetd::monitor_view::watch(conn, object(), (every, count), json, reconnect).await
}

/// `watch`'s way back to its daemon when its bus has gone: the bus it was found on
/// (`found_on`: an address, the session or the system bus), or, where that was the private bus
/// recorded in the state directory, the one recorded there now (a restarted daemon records
/// another). Never another bus: a search from scratch fell through from a lost record, or a lost
/// session bus, to the next bus and went on showing another daemon's observations as its own
/// (reviews found both).
async fn reach_the_same_bus(
    explicit: Option<&str>,
    state_dir: &Path,
    found_on: &bus::BusChoice,
) -> anyhow::Result<zbus::Connection> {
    let target = match (found_on, bus::client_address(explicit, state_dir)) {
        (bus::BusChoice::Address(_), now @ bus::BusChoice::Address(_)) => now,
        (bus::BusChoice::Address(_), _) => bail!(
            "no private bus recorded in {} yet",
            bus::address_file(state_dir).display()
        ),
        (same, _) => same.clone(),
    };
    let conn = bus::connect(&target).await?;
    if !daemon_answers_on(&conn).await {
        bail!("no daemon owns {} on {target} yet", wcetd::bus::BUS_NAME);
    }
    Ok(conn)
}

/// The bus [`reach_daemon`] found `conn` on: the one named (an address, or the private bus
/// recorded in the state directory), or, where none was, the session or the system bus.
async fn bus_found_on(
    conn: &zbus::Connection,
    explicit: Option<&str>,
    state_dir: &Path,
) -> bus::BusChoice {
    match bus::client_address(explicit, state_dir) {
        bus::BusChoice::Auto => found_on_bus(conn).await,
        named => named,
    }
}

/// Which of the session and system buses `conn` is on: the session bus where one is named and
/// its id is `conn`'s bus id, else the system bus (the two `Auto` tries, in its order).
async fn found_on_bus(conn: &zbus::Connection) -> bus::BusChoice {
    let id_of = |c: &zbus::Connection| {
        let c = c.clone();
        async move {
            zbus::fdo::DBusProxy::new(&c)
                .await
                .ok()?
                .get_id()
                .await
                .ok()
        }
    };
    let mine = id_of(conn).await;
    if std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some() {
        if let Ok(session) = bus::connect(&bus::BusChoice::Session).await {
            if mine.is_some() && id_of(&session).await == mine {
                return bus::BusChoice::Session;
            }
        }
    }
    bus::BusChoice::System
}

/// Connect where the daemon should be and check that it is there (or can be started by the bus);
/// a failure says what was tried and how to point wcetctl elsewhere. With no bus named, the
/// session bus (if the environment names one) is tried and then the system bus: a login under
/// systemd has a session bus, and stopping at it never found the system service.
pub(crate) async fn reach_daemon(
    explicit: Option<&str>,
    state_dir: &Path,
) -> anyhow::Result<zbus::Connection> {
    let choice = bus::client_address(explicit, state_dir);
    let hint = "start the daemon (`systemctl start wcetd`, or `wcetd` for a private bus), or point wcetctl at its bus with --bus-address ADDR, $WCETD_BUS_ADDRESS or --state-dir DIR (where a private bus address is recorded)";
    let candidates = match &choice {
        bus::BusChoice::Auto => {
            let session = std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some();
            let mut both = vec![bus::BusChoice::System];
            if session {
                both.insert(0, bus::BusChoice::Session);
            }
            both
        }
        named => vec![named.clone()],
    };
    let (mut unreachable, mut unowned) = (Vec::new(), Vec::new());
    for candidate in &candidates {
        let what = described(candidate, explicit, state_dir);
        match bus::connect(candidate).await {
            Err(e) => unreachable.push(format!("{what}: {e:#}")),
            Ok(conn) if daemon_answers_on(&conn).await => return Ok(conn),
            Ok(_) => unowned.push(what),
        }
    }
    let none_recorded = format!(
        "no --bus-address, no $WCETD_BUS_ADDRESS, no private bus recorded in {}",
        bus::address_file(state_dir).display()
    );
    let prefix = if choice == bus::BusChoice::Auto {
        format!("{none_recorded}; then ")
    } else {
        String::new()
    };
    if unowned.is_empty() {
        anyhow::bail!(
            "cannot reach a bus: tried {prefix}{}; {hint}",
            unreachable.join("; ")
        );
    }
    let also = if unreachable.is_empty() {
        String::new()
    } else {
        format!("; could not connect to {}", unreachable.join("; "))
    };
    anyhow::bail!(
        "no daemon owns {} on the bus (tried {prefix}{}{also}); {hint}",
        wcetd::bus::BUS_NAME,
        unowned.join(", then ")
    )
}

/// What `choice` is, for a message: how the user named it, or where it was found.
fn described(choice: &bus::BusChoice, explicit: Option<&str>, state_dir: &Path) -> String {
    let from_env = std::env::var_os("WCETD_BUS_ADDRESS").is_some_and(|v| !v.is_empty());
    match choice {
        bus::BusChoice::Address(a) if explicit.is_some() => format!("--bus-address {a}"),
        bus::BusChoice::Address(a) if from_env => format!("$WCETD_BUS_ADDRESS ({a})"),
        bus::BusChoice::Address(a) => format!(
            "the private bus recorded in {} ({a})",
            bus::address_file(state_dir).display()
        ),
        other => other.to_string(),
    }
}

/// Whether the daemon owns its name on `conn`'s bus, or the bus can start it.
async fn daemon_answers_on(conn: &zbus::Connection) -> bool {
    let Ok(dbus) = zbus::fdo::DBusProxy::new(conn).await else {
        return false;
    };
    let Ok(name) = zbus::names::BusName::try_from(wcetd::bus::BUS_NAME) else {
        return false;
    };
    if dbus.name_has_owner(name).await.unwrap_or(false) {
        return true;
    }
    dbus.list_activatable_names()
        .await
        .map(|names| names.iter().any(|n| n.as_str() == wcetd::bus::BUS_NAME))
        .unwrap_or(false)
}

pub(crate) async fn jobs(json: bool, conn: &zbus::Connection) -> anyhow::Result<()> {
    let jobs = calibration_proxy(conn)
        .await?
        .list_jobs()
        .await
        .map_err(explain)?;
    if json {
        let v: Vec<_> = jobs
            .iter()
            .map(|(id, state, p, message, kernels)| {
                serde_json::json!({"job": id, "state": state, "progress": p, "message": message, "kernels": kernels})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    if jobs.is_empty() {
        println!("no jobs since the daemon started");
    }
    for (id, state, p, message, kernels) in jobs {
        println!(
            "job {id:<4} {state:<9} {:>3.0}%  {message}  [{}]",
            p * 100.0,
            kernels.join(", ")
        );
    }
    Ok(())
}

/// A bus error as the daemon phrased it: its name and its message, nothing else.
pub(crate) fn explain(e: zbus::Error) -> anyhow::Error {
    match e {
        zbus::Error::MethodError(name, Some(msg), _) => anyhow::anyhow!("{msg} ({name})"),
        zbus::Error::FDO(e) => {
            let name = zbus::DBusError::name(&*e).to_string();
            anyhow::anyhow!(
                "{} ({name})",
                zbus::DBusError::description(&*e).unwrap_or("")
            )
        }
        e => anyhow::anyhow!(e),
    }
}

pub(crate) fn print_list(json: bool, kernels: Vec<String>) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string(&kernels)?);
    } else {
        kernels.iter().for_each(|k| println!("{k}"));
    }
    Ok(())
}

/// `GetBoundInfo`, or `GetBoundInfoTagged` for one interference.
pub(crate) async fn bound_info(
    bounds: &BoundsProxy<'_>,
    kernel: &str,
    sms: u32,
    interference: Option<Interference>,
) -> anyhow::Result<std::collections::HashMap<String, zbus::OwnedVariant>> {
    match interference {
        Some(tag) => bounds
            .get_bound_info_tagged(kernel, sms, &tag.to_string())
            .await
            .map_err(explain),
        None => bounds.get_bound_info(kernel, sms).await.map_err(explain),
    }
}

pub(crate) async fn print_bound(
    json: bool,
    bounds: &BoundsProxy<'_>,
    kernel: &str,
    sms: u32,
    interference: Option<Interference>,
) -> anyhow::Result<()> {
    let info = bound_info(bounds, kernel, sms, interference).await?;
    let mut sorted: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    for (k, v) in info {
        sorted.insert(k, variant_json(&v));
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&sorted)?);
    } else {
        for (k, v) in &sorted {
            println!(
                "{k:>22}  {}",
                v.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| v.to_string())
            );
        }
    }
    Ok(())
}

pub(crate) fn variant_json(v: &zbus::OwnedVariant) -> serde_json::Value {
    if let Ok(x) = u64::try_from(v) {
        return x.into();
    }
    if let Ok(x) = u32::try_from(v) {
        return x.into();
    }
    if let Ok(x) = bool::try_from(v) {
        return x.into();
    }
    if let Ok(x) = f64::try_from(v) {
        return x.into();
    }
    if let Ok(x) = <&str>::try_from(v) {
        return x.into();
    }
    if let Ok(Ok(x)) = v.try_clone().map(<Vec<String>>::try_from) {
        return x.into();
    }
    serde_json::Value::String(v.to_string())
}

/// `wcetctl curve`'s columns after SMs and bound_ns: the GetBoundInfo key, the header, and the
/// width (negative: left-aligned). JSON has these and [`PREDICTION_LABEL`].
const CURVE_COLUMNS: [(&str, &str, i32); 10] = [
    ("interference", "interference", -12),
    ("exceedance", "exceedance", 10),
    ("stale", "stale", -5),
    ("provenance", "provenance", -12),
    ("basis", "basis", -12),
    ("observed_max_ns", "observed_max_ns", 15),
    ("samples", "samples", 7),
    ("typical_ns", "typical_ns", 12),
    ("mean_ns", "mean_ns", 12),
    ("predicted_typical_ns", "predicted_ns", 12),
];
const PREDICTION_LABEL: &str = "prediction";

/// One row of `wcetctl curve`: SMs, bound_ns, and the values of [`CURVE_COLUMNS`] and
/// [`PREDICTION_LABEL`] in that order.
type CurveRow = (u32, u64, Vec<serde_json::Value>);

pub(crate) async fn print_curve(
    json: bool,
    bounds: &BoundsProxy<'_>,
    kernel: &str,
    interference: Option<Interference>,
) -> anyhow::Result<()> {
    let keys: Vec<&str> = CURVE_COLUMNS
        .iter()
        .map(|c| c.0)
        .chain([PREDICTION_LABEL])
        .collect();
    let rows = curve_rows(bounds, kernel, interference, &keys).await?;
    if json {
        let v: Vec<_> = rows
            .iter()
            .map(|(sms, bound, values)| {
                let mut o = serde_json::json!({"sms": sms, "bound_ns": bound});
                for (k, v) in keys.iter().zip(values) {
                    o[*k] = v.clone();
                }
                o
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    print_curve_table(kernel, &rows);
    Ok(())
}

/// The curve's rows, one per partition size, with the GetBoundInfo values of `keys`.
async fn curve_rows(
    bounds: &BoundsProxy<'_>,
    kernel: &str,
    interference: Option<Interference>,
    keys: &[&str],
) -> anyhow::Result<Vec<CurveRow>> {
    let sizes = bounds.partition_sizes().await.map_err(explain)?;
    let mut rows = Vec::new();
    for sms in &sizes {
        let info = bound_info(bounds, kernel, *sms, interference).await?;
        let bound = info
            .get("bound_ns")
            .and_then(|v| u64::try_from(v).ok())
            .unwrap_or(0);
        let values: Vec<serde_json::Value> = keys
            .iter()
            .map(|k| info.get(*k).map(variant_json).unwrap_or_default())
            .collect();
        rows.push((*sms, bound, values));
    }
    Ok(rows)
}

/// The curve as a table under the kernel's name, then a legend; the prediction's label is said
/// once in the legend rather than in every row.
fn print_curve_table(kernel: &str, rows: &[CurveRow]) {
    println!("{kernel}");
    print_curve_line(
        "SMs",
        "bound_ns",
        CURVE_COLUMNS.iter().map(|c| c.1.into()).collect(),
    );
    let mut label = String::new();
    for (sms, bound, v) in rows {
        // JSON values ignore width and alignment, so render them as text first.
        let mut cells: Vec<String> = v
            .iter()
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
            .collect();
        label = cells.pop().unwrap_or_default();
        if let Some(e) = v[1].as_f64() {
            cells[1] = wcetd::model::exceedance_text(e);
        }
        print_curve_line(&sms.to_string(), &bound.to_string(), cells);
    }
    println!("basis: what the bound rests on (measured; verified: the fitted curve checked by the sweep there; fitted)\ntypical_ns, mean_ns: measured median and mean (0 where not measured)\npredicted_ns: {label}");
}

/// One line of the curve's table: `cells` padded to the widths of [`CURVE_COLUMNS`].
fn print_curve_line(sms: &str, bound: &str, cells: Vec<String>) {
    let pad = |text: &str, width: i32| match width {
        w if w < 0 => format!("{text:<0$}", (-w) as usize),
        w => format!("{text:>0$}", w as usize),
    };
    let cells: Vec<String> = CURVE_COLUMNS
        .iter()
        .zip(cells)
        .map(|(c, text)| pad(&text, c.2))
        .collect();
    println!("{sms:>5}  {bound:>14}  {}", cells.join("  "));
}

/// `wcetctl predict KERNEL` without `--device`: the daemon's own prediction for its device.
async fn predicted_by_daemon(
    json: bool,
    bounds: &BoundsProxy<'_>,
    kernel: &str,
    sizes: &[u32],
) -> anyhow::Result<()> {
    if kernel.ends_with(".toml") {
        bail!("{kernel}: the daemon predicts the kernels it has loaded, by name; accepted: a kernel's name (`wcetctl list`), or the manifest's path with --device");
    }
    let (points, label) = bounds.get_predicted_curve(kernel).await.map_err(explain)?;
    if points.is_empty() {
        bail!("no prediction for `{kernel}`: {label}");
    }
    let device = bounds.device().await.map_err(explain)?;
    if let Some(m) = sizes.iter().find(|m| !points.iter().any(|p| p.0 == **m)) {
        let accepted: Vec<String> = points.iter().map(|p| p.0.to_string()).collect();
        bail!(
            "--sizes {m}: not a partition size of {device}; accepted: {}",
            accepted.join(", ")
        );
    }
    let curve = wcetd::model::predict::PredictedCurve {
        device,
        points: points
            .into_iter()
            .filter(|p| sizes.is_empty() || sizes.contains(&p.0))
            .map(|(m, t)| (m, t as f64))
            .collect(),
    };
    // The daemon's label says what the prediction rests on after "from the".
    let basis = label
        .split_once(" from the ")
        .map_or(label.as_str(), |(_, b)| b);
    print_prediction(json, kernel, &curve, &label, basis)
}

pub(crate) async fn recalibrate(
    json: bool,
    conn: &zbus::Connection,
    kernels: &[String],
    interference: &[Interference],
    no_wait: bool,
) -> anyhow::Result<()> {
    let calibration = calibration_proxy(conn).await?;
    let names: Vec<&str> = kernels.iter().map(String::as_str).collect();
    // Listen before the job exists, so that neither its end nor a Ctrl-C can be missed.
    let mut signals = JobSignals::subscribe(&calibration).await?;
    let job = start_recalibration(&calibration, &names, interference)
        .await
        .map_err(explain)?;
    if no_wait {
        if json {
            println!("{}", serde_json::json!({"job": job, "state": "queued"}));
        } else {
            let wcetctl = command();
            println!("job {job} queued; follow it with `{wcetctl} jobs`, stop it with `{wcetctl} cancel {job}`");
        }
        return Ok(());
    }
    let bar = (!json && std::io::stderr().is_terminal()).then(|| progress_bar(job));
    let JobEnd {
        state,
        message,
        cancelling,
    } = follow_job(&calibration, job, &mut signals, bar.as_ref()).await?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if json {
        println!(
            "{}",
            serde_json::json!({"job": job, "state": state, "message": message})
        );
    } else {
        println!("job {job}: {state}: {message}");
    }
    match state.as_str() {
        "done" => Ok(()),
        "cancelled" if cancelling => Err(Interrupted.into()),
        _ => bail!("job {job} ended {state}"),
    }
}

/// Queue the recalibration of `names` (every kernel when empty): under every interference, or
/// under the `interference` named.
async fn start_recalibration(
    calibration: &CalibrationProxy<'_>,
    names: &[&str],
    interference: &[Interference],
) -> zbus::Result<u64> {
    if interference.is_empty() {
        calibration.recalibrate(names).await
    } else {
        let tags: Vec<String> = interference.iter().map(ToString::to_string).collect();
        let options = std::collections::HashMap::from([("interference", tags.into())]);
        calibration.recalibrate_with(names, options).await
    }
}

/// What `recalibrate` follows a job by: its end, its progress, the daemon leaving the bus, and
/// Ctrl-C. Subscribed to before the job exists, so that none of them can be missed.
struct JobSignals {
    finished: wcetd::client::JobFinishedStream,
    progress: wcetd::client::JobProgressStream,
    owner: zbus::proxy::OwnerChangedStream<'static>,
    interrupt: tokio::signal::unix::Signal,
}

impl JobSignals {
    async fn subscribe(calibration: &CalibrationProxy<'static>) -> anyhow::Result<Self> {
        Ok(Self {
            finished: calibration.receive_job_finished().await?,
            progress: calibration.receive_job_progress().await?,
            owner: calibration.inner().receive_owner_changed().await?,
            interrupt: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?,
        })
    }
}

/// How a followed job ended, and whether a Ctrl-C asked for its cancel (a job cancelled so
/// exits as interrupted, not as failed).
struct JobEnd {
    state: String,
    message: String,
    cancelling: bool,
}

/// Follow `job` until it ends, moving the `bar` along. The first Ctrl-C cancels the job and
/// waits on; a second exits without waiting, as does the daemon leaving the bus.
async fn follow_job(
    calibration: &CalibrationProxy<'_>,
    job: u64,
    signals: &mut JobSignals,
    bar: Option<&indicatif::ProgressBar>,
) -> anyhow::Result<JobEnd> {
    use futures_util::StreamExt;
    let (mut state, _, mut message) = calibration.get_job(job).await.map_err(explain)?;
    let mut cancelling = false;
    while !matches!(state.as_str(), "done" | "failed" | "cancelled") {
        tokio::select! {
            Some(signal) = signals.finished.next() => {
                let args = signal.args()?;
                if args.job == job {
                    (state, message) = (args.state, args.message);
                }
            }
            Some(signal) = signals.progress.next() => {
                let args = signal.args()?;
                if let (Some(b), true) = (bar, args.job == job) {
                    b.set_position((args.progress * 1000.0) as u64);
                    // GetJob's message names the kernel, size and interference being measured.
                    if let Ok((_, _, now)) = calibration.get_job(job).await {
                        b.set_message(now);
                    }
                }
            }
            Some(_) = signals.owner.next() => {
                if let Some(b) = bar {
                    b.abandon();
                }
                anyhow::bail!(wcetd::client::daemon_left(job));
            }
            _ = signals.interrupt.recv() => {
                // Said above the bar, which stays where it is.
                let say = |what: &str| match bar {
                    Some(b) => b.suspend(|| eprintln!("wcetctl: {what}")),
                    None => eprintln!("wcetctl: {what}"),
                };
                if cancelling {
                    say(&format!("job {job} is being cancelled; `{} jobs` shows when it has stopped", command()));
                    return Err(Interrupted.into());
                }
                cancelling = true;
                say(&format!("Ctrl-C: cancelling job {job} (what it has not yet published stays as it was); Ctrl-C again to exit without waiting"));
                // Refused only when the job has just finished: its JobFinished says how.
                let _ = calibration.cancel_job(job).await;
            }
        }
    }
    Ok(JobEnd {
        state,
        message,
        cancelling,
    })
}

/// A bar for one job: how far, how long it has run, when it should end, and what it measures now.
pub(crate) fn progress_bar(job: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(1000);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "job {prefix} [{bar:30}] {percent:>3}% {elapsed} ETA {eta}  {wide_msg}",
        )
        .expect("static progress template")
        .progress_chars("=> "),
    );
    bar.set_prefix(job.to_string());
    bar.set_message("queued");
    bar
}

/// One `ImportSamples` call per kernel, each waited for; a progress bar over the samples sent.
pub(crate) async fn import(
    json: bool,
    conn: &zbus::Connection,
    set: &samples::SampleSet,
    geometry: &BTreeMap<String, Geometry>,
    interference: Interference,
    source: &str,
) -> anyhow::Result<()> {
    let calibration = calibration_proxy(conn).await?;
    let total: u64 = set
        .values()
        .flat_map(|s| s.values())
        .map(|t| t.len() as u64)
        .sum();
    let bar = (!json && total > 100_000).then(|| import_bar(total));
    // The file's kernels are the device's evidence of sustained slowdowns, as `fit` pools them:
    // each import is sent what all of them show (the daemon takes it only where larger).
    let batch = wcetd::model::throttle::sustained_slowdown(
        set.values()
            .flat_map(|by_size| by_size.values())
            .map(|t| &t[..]),
    );
    let mut results = Vec::new();
    let mut failed = 0;
    // On standard output, around the bar: its own `println` prints nothing where the bar is
    // hidden (standard error not a terminal), and every kernel's line went missing (a hunt).
    let say = |line: String| match &bar {
        Some(b) => b.suspend(|| println!("{line}")),
        None => println!("{line}"),
    };
    for (kernel, sizes) in set {
        let pairs: Vec<(u32, u64)> = sizes
            .iter()
            .flat_map(|(&m, times)| times.iter().map(move |&t| (m, t)))
            .collect();
        let mut options = import_options(source, interference, geometry.get(kernel));
        if let Some(message) = too_many_to_send(pairs.len()) {
            if let Some(b) = &bar {
                b.inc(pairs.len() as u64);
            }
            failed += 1;
            results.push(serde_json::json!({"kernel": kernel, "job": 0, "samples": pairs.len(), "state": "refused", "message": message}));
            if !json {
                say(format!(
                    "{kernel}: {} samples, refused: {message}",
                    pairs.len()
                ));
            }
            continue;
        }
        if let Some(found) = &batch {
            options.insert("slowdown_depth", found.depth.into());
            options.insert("slowdown_share", found.share.into());
        }
        if let Some(b) = &bar {
            b.set_message(kernel.clone());
        }
        let (job, state, message) = import_kernel(&calibration, kernel, &pairs, options).await?;
        if let Some(b) = &bar {
            b.inc(pairs.len() as u64);
        }
        failed += usize::from(state != "done");
        results.push(serde_json::json!({"kernel": kernel, "job": job, "samples": pairs.len(), "state": state, "message": message}));
        if !json {
            let line = match job {
                0 => format!("{kernel}: {} samples, {state}: {message}", pairs.len()),
                _ => format!(
                    "{kernel}: {} samples, job {job} {state}: {message}",
                    pairs.len()
                ),
            };
            say(line);
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if json {
        println!("{}", serde_json::Value::Array(results));
    }
    if failed > 0 {
        bail!("{failed} of {} kernels were not imported", set.len());
    }
    Ok(())
}

/// Why `n` samples of one kernel are not sent, where they are more than one bus message carries:
/// refused here, with why, so that the rest are still sent (the call itself ended with "Broken
/// pipe" and stopped the whole import: a hunt).
fn too_many_to_send(n: usize) -> Option<String> {
    (n > wcetd::service::MAX_IMPORTED_SAMPLES).then(|| {
        format!(
            "more than one bus message carries; accepted: at most {} per kernel (one message of at most 32 MiB; thin the file, the first ones of each size say most)",
            wcetd::service::MAX_IMPORTED_SAMPLES
        )
    })
}

/// A bar over the `total` samples an import sends, named by the kernel being sent.
fn import_bar(total: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg:24} [{bar:30}] {pos}/{len} samples, ETA {eta}",
        )
        .expect("progress template"),
    );
    bar
}

/// The options of one kernel's `ImportSamples`: where the samples come from, the interference
/// they were measured under, and the kernel's launch geometry where the geometry file has it.
fn import_options<'a>(
    source: &'a str,
    interference: Interference,
    geometry: Option<&Geometry>,
) -> std::collections::HashMap<&'static str, zbus::Variant<'a>> {
    let mut options = std::collections::HashMap::new();
    options.insert("source", zbus::Variant::from(source));
    options.insert(
        "interference",
        zbus::Variant::from(interference.to_string()),
    );
    if let Some(g) = geometry {
        options.insert("blocks", g.blocks.into());
        options.insert("blocks_per_sm", g.blocks_per_sm.into());
    }
    options
}

/// Import one kernel's `pairs` of (SMs, time) and wait for the job: (job, state, message), job
/// 0 where the daemon refused the kernel.
async fn import_kernel(
    calibration: &CalibrationProxy<'_>,
    kernel: &str,
    pairs: &[(u32, u64)],
    options: std::collections::HashMap<&str, zbus::Variant<'_>>,
) -> anyhow::Result<(u64, String, String)> {
    // A kernel the daemon refuses (one it measured itself, say) is a failed row; the others
    // are still sent, and every outcome is listed.
    Ok(
        match calibration.import_samples(kernel, pairs, options).await {
            Ok(job) => {
                let (state, message) =
                    wcetd::client::wait_for_job(calibration, job, |_| {}).await?;
                (job, state, message)
            }
            Err(e) if refuses_the_kernel(&e) => {
                (0, "refused".to_string(), format!("{:#}", explain(e)))
            }
            Err(e) => return Err(explain(e).context(format!("importing {kernel}"))),
        },
    )
}

pub(crate) async fn import_calibration(
    json: bool,
    conn: &zbus::Connection,
    file: &Path,
    force: bool,
) -> anyhow::Result<()> {
    // The bus carries at most 128 MiB in one message (dbus-daemon's default): a larger bundle
    // could not be sent, and an endless input (`/dev/zero`) is refused there, not read until
    // memory runs out.
    const MAX_BUNDLE_BYTES: u64 = 128 << 20;
    let text = if file == Path::new("-") {
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut std::io::Read::take(std::io::stdin(), MAX_BUNDLE_BYTES + 1),
            &mut text,
        )
        .context("reading the bundle from standard input: accepted: UTF-8 JSON")?;
        anyhow::ensure!(
            text.len() as u64 <= MAX_BUNDLE_BYTES,
            "the bundle on standard input is longer than {MAX_BUNDLE_BYTES} bytes; accepted: a bundle of at most {MAX_BUNDLE_BYTES} bytes (the bus's largest message)"
        );
        text
    } else {
        wcetd::manifest::read_text_limited(file, MAX_BUNDLE_BYTES).with_context(|| {
            format!(
                "reading {} (a bundle from `wcetctl export`)",
                file.display()
            )
        })?
    };
    let mut options = std::collections::HashMap::new();
    if force {
        options.insert("force", zbus::Variant::from(true));
    }
    let kernels = calibration_proxy(conn)
        .await?
        .import_calibration_with(&text, options)
        .await
        .map_err(explain)?;
    if json {
        println!(
            "{}",
            // Queued, not done (the job imports them, `wcetctl jobs`); `force` as asked: whether
            // they are served stale the daemon decides from the bundle (`wcetctl bound`).
            serde_json::json!({"imported": kernels, "queued": true, "force": force})
        );
    } else {
        println!("{}", import_message(&kernels, force));
    }
    Ok(())
}

/// The source an import names by default: the samples file's path, as the daemon takes a
/// source (at most 200 bytes, no control characters): control characters (legal in a Linux
/// file name) replaced, and only the file name, cut at a character, where the path is longer.
fn default_source(samples: &std::path::Path) -> String {
    let clean = |s: String| -> String {
        s.chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .collect()
    };
    let path = clean(samples.display().to_string());
    if path.len() <= 200 {
        return path;
    }
    let mut name = clean(
        samples
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    );
    while name.len() > 200 {
        name.pop();
    }
    if name.is_empty() {
        "wcetctl import".into()
    } else {
        name
    }
}

/// What happens to the imported `kernels`. The daemon checks a bundle on this card only where
/// its configuration matches; `force` admits one of another configuration, served stale and
/// unchecked (docs/fleet.md), and this side cannot tell which case the daemon took.
/// Nothing is imported yet when the call returns: the job does it, and a failure or a cancel
/// there imports nothing (the message once said "imported" of a bundle a cancel then dropped).
fn import_message(kernels: &[String], force: bool) -> String {
    let names = kernels.join(", ");
    let wcetctl = command();
    let queued = format!("the import of {names} is queued as a job (`{wcetctl} jobs`; nothing is served from the bundle until it is done, and a failure or a cancel imports nothing)");
    let checked = "checked on this card, and recalibrated where a launch exceeds its bound";
    if !force {
        return format!("{queued}; they are {checked}");
    }
    format!(
        "{queued}, with --force: if the bundle is of another configuration than this card's, they are served stale, unchecked on this card, until recalibrated (`{wcetctl} recalibrate {}`); if it matches, they are {checked}",
        kernels.join(" ")
    )
}

pub(crate) async fn reload_kernels(json: bool, conn: &zbus::Connection) -> anyhow::Result<()> {
    let calibration = calibration_proxy(conn).await?;
    // The bus answers new and changed kernels in one list; what was served before tells them
    // apart. For the reader only (both are queued for calibration alike), so without the list
    // every kernel the reload names is shown as added.
    let before = match bounds_proxy(conn).await {
        Ok(bounds) => bounds.list_kernels().await.ok(),
        Err(_) => None,
    };
    if before.is_none() {
        eprintln!("wcetctl: ListKernels failed, so changed kernels are listed as added");
    }
    let before = before.unwrap_or_default();
    let (added, removed, rejected) = calibration.reload_kernels().await.map_err(explain)?;
    let (changed, new): (Vec<String>, Vec<String>) =
        added.iter().cloned().partition(|k| before.contains(k));
    if json {
        let rejected: Vec<_> = rejected
            .iter()
            .map(|(f, r)| serde_json::json!({"file": f, "reason": r}))
            .collect();
        println!(
            "{}",
            serde_json::json!({"added": added, "new": new, "changed": changed, "removed": removed, "rejected": rejected})
        );
    } else {
        let list = |names: &[String]| {
            if names.is_empty() {
                "-".to_string()
            } else {
                names.join(", ")
            }
        };
        println!("added:   {}", list(&new));
        println!("changed: {}", list(&changed));
        println!("removed: {}", list(&removed));
        for (file, reason) in &rejected {
            println!("rejected {file}: {reason}");
        }
    }
    if !rejected.is_empty() {
        return Err(Rejected(format!("{} manifest(s) rejected", rejected.len())).into());
    }
    Ok(())
}

/// `status` of the GPU `--gpu` names, or of every GPU the daemon serves.
pub(crate) async fn status_all(
    json: bool,
    conn: &zbus::Connection,
    bounds: &BoundsProxy<'_>,
) -> anyhow::Result<()> {
    let devices = match (OBJECT.get(), bounds.devices().await) {
        (None, Ok(devices)) if devices.len() > 1 => devices,
        _ => {
            let one = status(json, bounds).await?;
            if json {
                println!("{one}");
            }
            return Ok(());
        }
    };
    // Several GPUs: a section each, or one JSON array of (gpu, path, uuid, status).
    let mut all = Vec::new();
    for (n, path, uuid) in devices {
        let proxy = BoundsProxy::builder(conn)
            .path(path.to_string())
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await?;
        if !json {
            println!("GPU {n}  {path}  {uuid}");
        }
        let one = status(json, &proxy).await?;
        if json {
            all.push(serde_json::json!({"gpu": n, "path": path.to_string(), "uuid": uuid, "status": one}));
        } else {
            println!();
        }
    }
    if json {
        println!("{}", serde_json::Value::Array(all));
    }
    Ok(())
}

/// One GPU's status: printed as a table, or returned as JSON when `json`.
pub(crate) async fn status(
    json: bool,
    bounds: &BoundsProxy<'_>,
) -> anyhow::Result<serde_json::Value> {
    let device = bounds.device().await?;
    let backend = bounds.backend().await?;
    let total = bounds.total_sms().await?;
    let sizes = bounds.partition_sizes().await?;
    let health = bounds.health().await?;
    let stale = bounds.stale_kernels().await?;
    let overrun = overrun_kernels(bounds).await;
    let kernels = kernel_statuses(bounds, &sizes, &stale, &overrun).await?;
    if json {
        let calibrated: BTreeMap<_, _> = kernels
            .iter()
            .map(|(k, v)| (k.clone(), v["calibrated"].clone()))
            .collect();
        return Ok(
            serde_json::json!({"device": device, "backend": backend, "total_sms": total, "partition_sizes": sizes,
                "health": health, "stale_kernels": stale, "calibrated": calibrated, "kernels": kernels,
                "overrun_kernels": overrun}),
        );
    }
    println!("device      {device} ({backend}, {total} SMs)\npartitions  {sizes:?}\nhealth      {health}");
    if !overrun.is_empty() {
        println!(
            "overruns    {} (a reported launch exceeded a bound since calibration; see {} observed)",
            overrun.join(", "),
            command()
        );
    }
    print_kernel_statuses(&kernels);
    Ok(serde_json::Value::Null)
}

/// The kernels a reported launch overran since calibration. Empty from a daemon without
/// Monitor1 (older than it): it has nothing to say here.
async fn overrun_kernels(bounds: &BoundsProxy<'_>) -> Vec<String> {
    let path = bounds.inner().path().to_string();
    match wcetd::monitor_view::monitor_at(bounds.inner().connection(), &path).await {
        Ok(m) => m.overrun_kernels().await.unwrap_or_default(),
        Err(_) => Vec::new(),
    }
}

/// Per kernel: which bounds exist and what the safer of them guarantees (the same at every
/// size, so asked at the first size that serves one), as the JSON object `status` prints or
/// tabulates.
async fn kernel_statuses(
    bounds: &BoundsProxy<'_>,
    sizes: &[u32],
    stale: &[String],
    overrun: &[String],
) -> anyhow::Result<BTreeMap<String, serde_json::Value>> {
    let mut kernels = BTreeMap::new();
    for k in bounds.list_kernels().await? {
        let (looked, refused) = bound_info_somewhere(bounds, &k, sizes).await;
        // The daemon's NotCalibrated says so for a kernel held back for losing the device.
        let held_back = looked
            .as_ref()
            .is_err_and(|e| e.to_string().contains("and is held back:"));
        let info = looked.ok();
        let get = |key: &str| info.as_ref().and_then(|i| i.get(key)).map(variant_json);
        kernels.insert(
            k.clone(),
            serde_json::json!({
                "calibrated": info.is_some(),
                "sizes_refused": refused,
                "held_back": held_back,
                "stale": stale.contains(&k),
                "overrun": overrun.contains(&k),
                "interference_available": get("interference_available").unwrap_or_else(|| serde_json::json!([])),
                "exceedance": get("exceedance"),
                "tail": get("tail"),
            }),
        );
    }
    Ok(kernels)
}

/// `kernel`'s `GetBoundInfo` at the smallest of `sizes` that serves one (else the refusal at
/// the smallest), and, where one serves it, the sizes refused: a calibration without an entry
/// there (`Health` names it). Asked at the smallest alone, a kernel refused only there was
/// listed as not calibrated (a black-box run found it).
async fn bound_info_somewhere(
    bounds: &BoundsProxy<'_>,
    kernel: &str,
    sizes: &[u32],
) -> (
    zbus::Result<std::collections::HashMap<String, zbus::OwnedVariant>>,
    Vec<u32>,
) {
    let mut info = None;
    let mut first_refusal = None;
    let mut refused = Vec::new();
    for &m in sizes {
        // Once one size has answered in full, the bound alone says whether another is served.
        let served = match info {
            Some(_) => bounds.get_bound(kernel, m).await.map(|_| ()),
            None => bounds
                .get_bound_info(kernel, m)
                .await
                .map(|i| info = Some(i)),
        };
        if let Err(e) = served {
            refused.push(m);
            first_refusal.get_or_insert(e);
        }
    }
    match (info, first_refusal) {
        (Some(info), _) => (Ok(info), refused),
        (None, Some(e)) => (Err(e), Vec::new()),
        (None, None) => (
            Err(zbus::Error::Failure("no partition sizes".into())),
            refused,
        ),
    }
}

/// `status`'s table of kernels, one row each from [`kernel_statuses`].
fn print_kernel_statuses(kernels: &BTreeMap<String, serde_json::Value>) {
    // As wide as the longest name: manifests' kernels are often longer than the suite's.
    let w = kernels.keys().map(String::len).max().unwrap_or(0).max(10);
    println!(
        "  {:<w$} {:<19} {:<19} {:>10}  tail",
        "kernel", "state", "bounds", "exceedance"
    );
    for (k, v) in kernels {
        let state = kernel_state(v);
        let tags: Vec<&str> = v["interference_available"]
            .as_array()
            .map(|a| a.iter().filter_map(|t| t.as_str()).collect())
            .unwrap_or_default();
        let exceedance = v["exceedance"]
            .as_f64()
            .map_or("-".to_string(), wcetd::model::exceedance_text);
        let tags = if tags.is_empty() {
            "-".into()
        } else {
            tags.join(",")
        };
        let tail = v["tail"].as_str().unwrap_or("-");
        println!("  {k:<w$} {state:<19} {tags:<19} {exceedance:>10}  {tail}");
    }
}

/// A kernel's state column in `status`: the first of stale, overrun, calibrated and held back
/// that holds, else not calibrated.
fn kernel_state(v: &serde_json::Value) -> &'static str {
    if v["stale"] == true {
        "stale"
    } else if v["overrun"] == true {
        "calibrated, OVERRUN"
    } else if v["sizes_refused"].as_array().is_some_and(|r| !r.is_empty()) {
        "calibrated, GAPS"
    } else if v["calibrated"] == true {
        "calibrated"
    } else if v["held_back"] == true {
        "HELD BACK (Health)"
    } else {
        "not calibrated"
    }
}

/// The files a command reads, checked before the daemon is reached: a missing task set was
/// reported as a bus error when no daemon ran (it said nothing of the file).
fn check_input_files(command: &Command) -> anyhow::Result<()> {
    let files: Vec<&Path> = match command {
        Command::Admit { file, .. } | Command::Suggest { file, .. } => {
            taskset::load(file)?;
            Vec::new()
        }
        Command::Import {
            samples, geometry, ..
        } => std::iter::once(samples.as_path())
            .chain(geometry.as_deref())
            .collect(),
        Command::ImportCalibration { file, .. } if file.as_os_str() != "-" => vec![file.as_path()],
        _ => Vec::new(),
    };
    for file in files {
        std::fs::metadata(file).with_context(|| format!("{}", file.display()))?;
    }
    Ok(())
}

/// Whether the daemon refused one kernel's samples (the file's next kernels may still go), not
/// the call itself (the daemon gone, access denied, a full queue: nothing more will go).
fn refuses_the_kernel(e: &zbus::Error) -> bool {
    match e {
        zbus::Error::FDO(e) => matches!(**e, zbus::fdo::Error::InvalidArgs(_)),
        zbus::Error::MethodError(name, _, _) => matches!(
            name.as_str(),
            "org.wcetd.Error.UnknownKernel"
                | "org.wcetd.Error.InvalidPartition"
                | "org.freedesktop.DBus.Error.InvalidArgs"
        ),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    /// The default source is one the daemon takes: no control characters, at most 200 bytes.
    #[test]
    fn the_default_source_is_one_the_daemon_takes() {
        let short = std::path::Path::new("/data/run\n1.csv");
        assert_eq!(super::default_source(short), "/data/run?1.csv");
        let long = format!("/{}/{}.csv", "d".repeat(300), "é".repeat(150));
        let source = super::default_source(std::path::Path::new(&long));
        assert!(source.len() <= 200 && source.starts_with('é'), "{source}");
    }
}
