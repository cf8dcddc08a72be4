//! The bus face: `org.wcetd.Bounds1` and `org.wcetd.Calibration1` on `/org/wcetd/Wcetd1`, exactly
//! as the design notes fix them. Thin on purpose: each method checks what only the bus knows (the
//! caller), forwards to the [`Service`], and maps [`ServiceError`]s to the design's error names.
//! Service events become signals in [`forward_events`].

use std::collections::HashMap;
use std::sync::Arc;
use zbus::message::{Header, Message};
use zbus::names::ErrorName;
use zbus::object_server::SignalEmitter;
use zbus::OwnedObjectPath;
use zbus::OwnedVariant;
use zbus::{interface, Connection, Variant};

use crate::gpu::Interference;
use crate::service::{BoundInfo, Event, ImportOptions, Service, ServiceError};

use crate::bus::{device_path, OBJECT_PATH};

/// An error reply: a design-notes error name and a message that says what was wrong and what is
/// accepted.
#[derive(Debug, Clone)]
pub struct BusError {
    name: &'static str,
    message: String,
}

impl From<ServiceError> for BusError {
    fn from(e: ServiceError) -> Self {
        let name = match &e {
            ServiceError::InvalidArgs(_) => "org.freedesktop.DBus.Error.InvalidArgs",
            ServiceError::AccessDenied(_) => "org.freedesktop.DBus.Error.AccessDenied",
            ServiceError::UnknownKernel(_) => "org.wcetd.Error.UnknownKernel",
            ServiceError::NotCalibrated(_) => "org.wcetd.Error.NotCalibrated",
            ServiceError::InvalidPartition(_) => "org.wcetd.Error.InvalidPartition",
            ServiceError::Infeasible(_) => "org.wcetd.Error.Infeasible",
            ServiceError::Busy(_) => "org.wcetd.Error.Busy",
            ServiceError::Failed(_) => "org.freedesktop.DBus.Error.Failed",
        };
        BusError {
            name,
            message: printable(&e.to_string()),
        }
    }
}

/// `text` with every control character written as an escape (`\u{1b}`): error messages quote
/// what a caller sent (a bundle's driver field, a kernel name), and clients print them to a
/// terminal, which would act on an escape sequence a forged bundle carried into the refusal.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

impl From<zbus::Error> for BusError {
    fn from(e: zbus::Error) -> Self {
        BusError {
            name: "org.freedesktop.DBus.Error.Failed",
            message: e.to_string(),
        }
    }
}

impl zbus::DBusError for BusError {
    fn create_reply(&self, call: &Header<'_>) -> zbus::Result<Message> {
        Message::error(call, self.name()).build(&(self.message.as_str(),))
    }

    fn name(&self) -> ErrorName<'_> {
        ErrorName::from_static_str_unchecked(self.name)
    }

    fn description(&self) -> Option<&str> {
        Some(&self.message)
    }
}

/// Every device the daemon serves, as the `Devices` property gives them: (index, object path,
/// UUID), in index order.
pub type DeviceList = Vec<(u32, OwnedObjectPath, String)>;

/// `org.wcetd.Bounds1`: anyone may call.
pub struct Bounds {
    pub service: Service,
    pub devices: Arc<DeviceList>,
}

#[interface(name = "org.wcetd.Bounds1")]
impl Bounds {
    fn list_kernels(&self) -> Vec<String> {
        self.service.list_kernels()
    }

    fn get_bound(&self, kernel: &str, sms: u32) -> Result<u64, BusError> {
        Ok(self.service.bound(kernel, sms, None)?)
    }

    /// The bound and where it comes from, as a dictionary (api.md lists the keys).
    // (Doc comments here are the introspection's: notes for readers of the code are `//`.)
    // Off the runtime's threads, which answer `GetBound`: it reads the medians back from the
    // spill file, and waits out a reload's publishing (which writes a job record).
    async fn get_bound_info(
        &self,
        kernel: String,
        sms: u32,
    ) -> Result<HashMap<String, Variant<'static>>, BusError> {
        let service = self.service.clone();
        off_the_runtime(move || service.bound_info(&kernel, sms, None))
            .await
            .map(|info| info_dict(&info))
    }

    fn get_curve(&self, kernel: &str) -> Result<Vec<(u32, u64)>, BusError> {
        Ok(self.service.curve(kernel, None)?)
    }

    fn min_partition(&self, kernel: &str, deadline_ns: u64) -> Result<u32, BusError> {
        Ok(self.service.min_partition(kernel, deadline_ns, None)?.0)
    }

    /// `GetBound` for one interference tag (`isolated` or `contended`): an extension.
    fn get_bound_tagged(
        &self,
        kernel: &str,
        sms: u32,
        interference: &str,
    ) -> Result<u64, BusError> {
        let tag = parse_tag(interference)?;
        Ok(self.service.bound(kernel, sms, Some(tag))?)
    }

    /// `GetBoundInfo` for one interference tag (`isolated` or `contended`): an extension.
    async fn get_bound_info_tagged(
        &self,
        kernel: String,
        sms: u32,
        interference: String,
    ) -> Result<HashMap<String, Variant<'static>>, BusError> {
        let tag = parse_tag(&interference)?;
        let service = self.service.clone();
        off_the_runtime(move || service.bound_info(&kernel, sms, Some(tag)))
            .await
            .map(|info| info_dict(&info))
    }

    /// The predicted typical time at every partition size and its label (an extension): a
    /// prediction, never a bound, for a kernel whether or not it is calibrated yet; no sizes and
    /// a label starting `none:` that says why where there is none.
    fn get_predicted_curve(&self, kernel: &str) -> Result<(Vec<(u32, u64)>, String), BusError> {
        Ok(self.service.predicted_curve(kernel)?)
    }

    /// A method that does nothing, so benchmarks can compare `GetBound` against the bus itself.
    fn ping(&self) {}

    #[zbus(property(emits_changed_signal = "const"))]
    fn device(&self) -> String {
        self.service.device().name.clone()
    }

    /// Every device this daemon serves: (index, object path, UUID).
    #[zbus(property(emits_changed_signal = "const"))]
    fn devices(&self) -> DeviceList {
        self.devices.as_ref().clone()
    }

    #[zbus(property(emits_changed_signal = "const"))]
    fn backend(&self) -> String {
        self.service.device().backend.to_string()
    }

    #[zbus(property(emits_changed_signal = "const"))]
    fn total_sms(&self) -> u32 {
        self.service.device().total_sms
    }

    #[zbus(property(emits_changed_signal = "const"))]
    fn partition_sizes(&self) -> Vec<u32> {
        self.service.device().partition_sizes.clone()
    }

    /// `ok`, or `degraded: <why>`: after a failed calibration (old bounds are still served), and
    /// while stale bounds are served.
    // Off the runtime's threads: it waits out a reload's publishing, which writes a job record.
    #[zbus(property)]
    async fn health(&self) -> String {
        let service = self.service.clone();
        off_the_runtime(move || Ok(service.health()))
            .await
            .unwrap_or_else(|e| format!("degraded: Health could not be read ({})", e.message))
    }

    /// Kernels whose bounds were calibrated on a device that no longer matches (rule 3).
    #[zbus(property)]
    fn stale_kernels(&self) -> Vec<String> {
        self.service.stale_kernels()
    }

    #[zbus(signal)]
    async fn bounds_changed(emitter: &SignalEmitter<'_>, kernels: Vec<String>) -> zbus::Result<()>;
}

fn parse_tag(tag: &str) -> Result<Interference, ServiceError> {
    match tag {
        "isolated" => Ok(Interference::Isolated),
        "contended" => Ok(Interference::Contended),
        other => Err(ServiceError::InvalidArgs(format!(
            "interference `{other}` is unknown; accepted: isolated, contended"
        ))),
    }
}

/// `ImportSamples`' options: `blocks` and `blocks_per_sm` (u, both or neither), `interference`
/// (s), `source` (s), and `slowdown_depth` and `slowdown_share` (d, both or neither); anything
/// else is refused with what is accepted.
fn import_options(options: &HashMap<String, OwnedVariant>) -> Result<ImportOptions, ServiceError> {
    const ACCEPTED: &str =
        "blocks (u) and blocks_per_sm (u), interference (s: isolated or contended), source (s), slowdown_depth (d, above 0) and slowdown_share (d, above 0 to 1)";
    let bad = |key: &str, what: &str| {
        ServiceError::InvalidArgs(format!("option `{key}` {what}; accepted: {ACCEPTED}"))
    };
    let number = |key: &str| -> Result<Option<u32>, ServiceError> {
        options
            .get(key)
            .map(|v| u32::try_from(v).map_err(|_| bad(key, "must be a u32")))
            .transpose()
    };
    let text = |key: &str| -> Result<Option<String>, ServiceError> {
        options
            .get(key)
            .map(|v| {
                <&str>::try_from(v)
                    .map(str::to_string)
                    .map_err(|_| bad(key, "must be a string"))
            })
            .transpose()
    };
    let fraction = |key: &str, most: f64| -> Result<Option<f64>, ServiceError> {
        options
            .get(key)
            .map(|v| match f64::try_from(v) {
                Ok(x) if x > 0.0 && x <= most => Ok(x),
                _ => Err(bad(key, "must be a finite d in its range")),
            })
            .transpose()
    };
    const KNOWN: [&str; 6] = [
        "blocks",
        "blocks_per_sm",
        "interference",
        "source",
        "slowdown_depth",
        "slowdown_share",
    ];
    if let Some(key) = options.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(bad(key, "is unknown"));
    }
    let geometry = match (number("blocks")?, number("blocks_per_sm")?) {
        (Some(blocks), Some(blocks_per_sm)) if blocks > 0 && blocks_per_sm > 0 => {
            Some(crate::kernels::Geometry {
                blocks,
                blocks_per_sm,
            })
        }
        (None, None) => None,
        (Some(_), None) => return Err(bad("blocks", "needs blocks_per_sm beside it")),
        (None, Some(_)) => return Err(bad("blocks_per_sm", "needs blocks beside it")),
        _ => return Err(bad("blocks", "and blocks_per_sm must both be above 0")),
    };
    Ok(ImportOptions {
        geometry,
        interference: text("interference")?
            .map(|t| parse_tag(&t))
            .transpose()?
            .unwrap_or_default(),
        source: text("source")?.unwrap_or_else(|| "ImportSamples".into()),
        // Any depth the importer's evidence found: the daemon's own has no ceiling either, and
        // one at 10 refused every kernel of a file with a deep run (a review).
        batch_slowdown: match (
            fraction("slowdown_depth", f64::MAX)?,
            fraction("slowdown_share", 1.0)?,
        ) {
            (Some(depth), Some(share)) => Some((depth, share)),
            (None, None) => None,
            (Some(_), None) => return Err(bad("slowdown_depth", "needs slowdown_share beside it")),
            (None, Some(_)) => return Err(bad("slowdown_share", "needs slowdown_depth beside it")),
        },
    })
}

/// The reply of `GetBound` and `GetBoundTagged`: the bound, where it came from, the guarantee it
/// states, and what was measured or predicted beside it, each under a key of its own.
fn info_dict(b: &BoundInfo) -> HashMap<String, Variant<'static>> {
    let mut d = InfoDict(HashMap::new());
    d.put_provenance(b);
    d.put_guarantee(b);
    d.put_beside_the_bound(b);
    d.put_observed_floor(b);
    d.0
}

/// A bound's reply as it is filled in, key by key (in the order the keys have always been put).
struct InfoDict(HashMap<String, Variant<'static>>);

impl InfoDict {
    fn put(&mut self, k: &str, v: Variant<'static>) {
        self.0.insert(k.to_string(), v);
    }

    /// The bound and where it came from: size, calibration, samples, method, law and tail.
    fn put_provenance(&mut self, b: &BoundInfo) {
        self.put("bound_ns", b.entry.bound_ns.into());
        self.put("partition_sms", b.entry.sms.into());
        self.put("requested_sms", b.requested_sms.into());
        self.put("provenance", b.entry.provenance.to_string().into());
        self.put("basis", b.basis().into());
        self.put("calibrated_at", b.calibrated_at.to_rfc3339().into());
        self.put("calibration", b.calibration_id.clone().into());
        self.put("stale", b.stale.into());
        self.put("samples", b.entry.samples.into());
        // As the design fixes it, 0 where not measured; the sweep's launches under keys of their
        // own (a maximum beside `samples` 0 had no stated source).
        // (Where neither ran, a launch a bundle's arrival check timed here holds the bound up: it
        // stays `observed_max_ns`, the slowest launch this card timed at that size.)
        let (measured_max, verified_max) = if b.entry.verified_samples > 0 && b.entry.samples == 0 {
            (0, b.entry.observed_max_ns)
        } else {
            (b.entry.observed_max_ns, 0)
        };
        self.put("observed_max_ns", measured_max.into());
        self.put("verified_samples", b.entry.verified_samples.into());
        self.put("verified_max_ns", verified_max.into());
        self.put("method", b.method.clone().into());
        self.put("law", b.law.clone().into());
        self.put("tail", b.tail.clone().into());
        self.put("interference", b.interference.to_string().into());
    }

    /// The guarantee in numbers: what a scheduler compares before it stakes a deadline on a bound.
    fn put_guarantee(&mut self, b: &BoundInfo) {
        let g = &b.guarantee;
        self.put("exceedance", g.exceedance.into());
        self.put("exceedance_basis", g.basis.as_str().into());
        self.put("configured_exceedance", g.configured_exceedance.into());
        let available: Vec<String> = g.available.iter().map(ToString::to_string).collect();
        self.put("interference_available", available.into());
        self.put("stressor_sms", g.stressor_sms.into());
        self.put("process_shift", b.process_shift.into());
        let mut notes = b.notes.clone();
        notes.extend(g.weaker_note());
        self.put("notes", notes.join("; ").into());
    }

    /// What stands beside the bound and is no bound: the clock it was scaled for, the measured
    /// average case, a labelled prediction, and where the calibration came from.
    fn put_beside_the_bound(&mut self, b: &BoundInfo) {
        self.put("clock_scaled", b.clock.scaled.into());
        self.put("calibrated_clock_mhz", b.clock.calibrated_mhz.into());
        self.put("current_clock_mhz", b.clock.current_mhz.into());
        // The average case beside the worst: measured, never a bound.
        self.put("typical_ns", b.typical_ns.into());
        self.put("mean_ns", b.mean_ns.into());
        // A prediction, labelled as one; 0 where there is none, and the label says why. No bound is
        // computed from it.
        self.put("predicted_typical_ns", b.predicted.typical_ns.into());
        self.put("prediction", b.predicted.label.clone().into());
        self.put("origin", b.origin.as_str().into());
        self.put("source", b.source.clone().into());
    }

    /// Rule 1 for production (Monitor1.Report): the highest time reported that bounds this size.
    fn put_observed_floor(&mut self, b: &BoundInfo) {
        self.put(
            "observed_floor_ns",
            b.observed.map_or(0, |f| f.floor_ns).into(),
        );
        // Which series that time was reported under ("" where none, or carried over from another
        // fingerprint): untagged, it may be the other interference than the calibration's.
        self.put(
            "observed_floor_interference",
            b.observed
                .and_then(|f| f.tag)
                .map_or(String::new(), |t| t.to_string())
                .into(),
        );
    }
}

/// Run `work` on tokio's blocking pool, not on the runtime's threads, which answer every
/// `GetBound`: each call given to it writes the job record (a write and two fsyncs) or waits out a
/// reload's publishing, and on a slow or full disk an operator's `Recalibrate` held every query
/// behind it.
pub(crate) async fn off_the_runtime<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ServiceError> + Send + 'static,
) -> Result<T, BusError> {
    // A few at a time: a burst of 20,000 pipelined `GetBoundInfo` took tokio's blocking pool to
    // its 512 threads; the rest wait their turn on the runtime, which stays free meanwhile.
    static CALLS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(8);
    in_turn(&CALLS, "the call", work).await
}

/// Run `work` on tokio's blocking pool once `turns` gives it a turn; `what` names it in errors.
pub(crate) async fn in_turn<T: Send + 'static>(
    turns: &'static tokio::sync::Semaphore,
    what: &'static str,
    work: impl FnOnce() -> Result<T, ServiceError> + Send + 'static,
) -> Result<T, BusError> {
    let turn = turns
        .acquire()
        .await
        .map_err(|e| ServiceError::Failed(format!("{what} could not start: {e}")))?;
    let work = move || {
        let _turn = turn;
        work()
    };
    match tokio::task::spawn_blocking(work).await {
        Ok(answer) => Ok(answer?),
        Err(e) => Err(ServiceError::Failed(format!("{what} stopped: {e}")).into()),
    }
}

/// `org.wcetd.Calibration1`: operators only (root, the operator group, or the daemon's own user).
pub struct Calibration {
    pub service: Service,
    pub access: crate::access::OperatorPolicy,
    /// Every device's service, this one's included: the kernel directories are the daemon's, so
    /// a reload asked of one device is done by all.
    pub every_device: Arc<Vec<Service>>,
}

#[interface(name = "org.wcetd.Calibration1")]
impl Calibration {
    async fn recalibrate(
        &self,
        kernels: Vec<String>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<u64, BusError> {
        self.access.check(conn, &header, "Recalibrate").await?;
        let service = self.service.clone();
        off_the_runtime(move || service.recalibrate(&kernels)).await
    }

    /// `Recalibrate` with options: `interference` (as: `isolated`, `contended`; default both,
    /// or what the daemon is configured to measure).
    async fn recalibrate_with(
        &self,
        kernels: Vec<String>,
        options: HashMap<String, zbus::OwnedVariant>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<u64, BusError> {
        self.access.check(conn, &header, "RecalibrateWith").await?;
        let mut tags = Vec::new();
        for (key, value) in &options {
            if key != "interference" {
                return Err(ServiceError::InvalidArgs(format!(
                    "option {key} is unknown; accepted: interference (as)"
                ))
                .into());
            }
            let names = <Vec<String>>::try_from(value.try_clone()?)
                .map_err(|_| {
                    ServiceError::InvalidArgs(
                        "option interference must be of type as; accepted: [\"isolated\"], [\"contended\"] or both".into(),
                    )
                })?;
            if names.is_empty() {
                // Left out, the option means the configured tags; given empty, it asks for none.
                return Err(ServiceError::InvalidArgs(
                    "option interference is empty; accepted: [\"isolated\"], [\"contended\"] or both (leave the option out for the configured ones)".into(),
                )
                .into());
            }
            for name in names {
                tags.push(parse_tag(&name)?);
            }
        }
        let service = self.service.clone();
        off_the_runtime(move || service.recalibrate_with(&kernels, &tags)).await
    }

    /// Every job of this daemon run: (job, state, progress, message, kernels), oldest first.
    async fn list_jobs(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<Vec<(u64, String, f64, String, Vec<String>)>, BusError> {
        self.access.check(conn, &header, "ListJobs").await?;
        Ok(self
            .service
            .jobs()
            .into_iter()
            .map(|(id, s)| {
                (
                    id,
                    s.state.as_str().to_string(),
                    s.progress,
                    s.message,
                    s.kernels,
                )
            })
            .collect())
    }

    async fn get_job(
        &self,
        job: u64,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<(String, f64, String), BusError> {
        self.access.check(conn, &header, "GetJob").await?;
        let s = self.service.job(job)?;
        Ok((s.state.as_str().to_string(), s.progress, s.message))
    }

    async fn cancel_job(
        &self,
        job: u64,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<(), BusError> {
        self.access.check(conn, &header, "CancelJob").await?;
        let service = self.service.clone();
        off_the_runtime(move || service.cancel_job(job)).await
    }

    /// This device's current calibrations of `kernels` (every one when empty), as a bundle (JSON)
    /// for another daemon with the same configuration: an extension for fleets.
    async fn export_calibration(
        &self,
        kernels: Vec<String>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<String, BusError> {
        self.access
            .check(conn, &header, "ExportCalibration")
            .await?;
        let bundle = self.service.export_calibration(&kernels)?;
        serde_json::to_string(&bundle).map_err(|e| BusError {
            name: "org.freedesktop.DBus.Error.Failed",
            message: format!("writing the bundle: {e}"),
        })
    }

    /// Another daemon's calibrations, accepted where its fingerprint matches this device; then
    /// checked on this card (a job). Returns the kernels.
    async fn import_calibration(
        &self,
        bundle: String,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<Vec<String>, BusError> {
        self.access
            .check(conn, &header, "ImportCalibration")
            .await?;
        let service = self.service.clone();
        off_the_runtime(move || service.import_calibration(&bundle, false)).await
    }

    /// `ImportCalibration` with options: `force` (b) imports a bundle of another configuration as
    /// stale instead of refusing it.
    async fn import_calibration_with(
        &self,
        bundle: String,
        options: HashMap<String, OwnedVariant>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<Vec<String>, BusError> {
        self.access
            .check(conn, &header, "ImportCalibration")
            .await?;
        if let Some(key) = options.keys().find(|k| k.as_str() != "force") {
            return Err(ServiceError::InvalidArgs(format!(
                "option `{key}` is unknown; accepted: force (b)"
            ))
            .into());
        }
        let force = match options.get("force") {
            None => false,
            Some(v) => bool::try_from(v).map_err(|_| {
                ServiceError::InvalidArgs("option `force` must be a boolean (b)".into())
            })?,
        };
        let service = self.service.clone();
        off_the_runtime(move || service.import_calibration(&bundle, force)).await
    }

    /// Reread the kernel directories: (added, removed, rejected as (file, reason)).
    async fn reload_kernels(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<(Vec<String>, Vec<String>, Vec<(String, String)>), BusError> {
        self.access.check(conn, &header, "ReloadKernels").await?;
        // Off the bus's threads: a reload reads and hashes every module and fill file (a 1.5 GB
        // fill file held every `GetBound` for 4.6 s).
        let (service, every_device) = (self.service.clone(), Arc::clone(&self.every_device));
        tokio::task::spawn_blocking(move || {
            let answer = service.reload_kernels();
            // The others too, or they would go on serving, as current, bounds of code a name
            // no longer runs (each announces its own changes on its own object).
            for other in every_device.iter() {
                if !other.is(&service) {
                    other.reload_kernels();
                }
            }
            answer
        })
        .await
        .map_err(|e| BusError {
            name: "org.freedesktop.DBus.Error.Failed",
            message: format!("reloading the kernel directories: {e}"),
        })
    }

    /// Bounds from samples measured elsewhere; the job fits them as measured ones are fitted.
    async fn import_samples(
        &self,
        kernel: String,
        samples: Vec<(u32, u64)>,
        options: HashMap<String, OwnedVariant>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<u64, BusError> {
        self.access.check(conn, &header, "ImportSamples").await?;
        let options = import_options(&options)?;
        let service = self.service.clone();
        off_the_runtime(move || service.import_samples(&kernel, &samples, options)).await
    }

    #[zbus(signal)]
    async fn job_progress(emitter: &SignalEmitter<'_>, job: u64, progress: f64)
        -> zbus::Result<()>;

    #[zbus(signal)]
    async fn job_finished(
        emitter: &SignalEmitter<'_>,
        job: u64,
        state: &str,
        message: &str,
    ) -> zbus::Result<()>;
}

/// Serve each device at `/org/wcetd/Wcetd1/gpu/N`, and `default` at `/org/wcetd/Wcetd1` too.
/// Each object forwards to its own [`Service`] (its own worker, queue, store and health), so a
/// job or a fault on one device never holds up another's queries.
pub async fn serve_devices(
    conn: &Connection,
    devices: &[(u32, Service)],
    default: u32,
    access: crate::access::OperatorPolicy,
    reporters: crate::access::ReporterPolicy,
) -> zbus::Result<()> {
    let reporters = Arc::new(reporters);
    let list: DeviceList = devices
        .iter()
        .map(|(n, s)| {
            let path = OwnedObjectPath::try_from(device_path(*n)).expect("a valid object path");
            (*n, path, s.device().fingerprint.uuid.clone())
        })
        .collect();
    let list = Arc::new(list);
    let every_device: Arc<Vec<Service>> =
        Arc::new(devices.iter().map(|(_, s)| s.clone()).collect());
    for (n, service) in devices {
        let shared = (&list, &every_device);
        let access = (&access, &reporters);
        serve_at(conn, &device_path(*n), service, shared, access).await?;
        if *n == default {
            serve_at(conn, OBJECT_PATH, service, shared, access).await?;
        }
    }
    Ok(())
}

async fn serve_at(
    conn: &Connection,
    path: &str,
    service: &Service,
    (devices, every_device): (&Arc<DeviceList>, &Arc<Vec<Service>>),
    (access, reporters): (
        &crate::access::OperatorPolicy,
        &Arc<crate::access::ReporterPolicy>,
    ),
) -> zbus::Result<()> {
    let server = conn.object_server();
    let bounds = Bounds {
        service: service.clone(),
        devices: Arc::clone(devices),
    };
    server.at(path, bounds).await?;
    let admission = crate::admission_bus::Admission {
        service: service.clone(),
    };
    server.at(path, admission).await?;
    let calibration = Calibration {
        service: service.clone(),
        access: access.clone(),
        every_device: Arc::clone(every_device),
    };
    server.at(path, calibration).await?;
    let monitor = crate::monitor_bus::Monitor {
        service: service.clone(),
        access: Arc::clone(reporters),
    };
    server.at(path, monitor).await?;
    Ok(())
}

/// The jobs whose `JobFinished` went out on one object: api.md promises one per job, and three
/// parties may send it (the forwarder as the event comes, a catch-up after the forwarder lagged,
/// the daemon's stop for the jobs it cancels), so whoever records a job here first sends it.
#[derive(Clone, Default)]
pub struct Announced(Arc<std::sync::Mutex<std::collections::BTreeSet<u64>>>);

impl Announced {
    /// Whether `job` is to be announced now (it was not yet).
    fn first(&self, job: u64) -> bool {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(job)
    }

    /// Forget jobs older than `oldest`: the service lists none of them, so none can finish again.
    fn forget_before(&self, oldest: u64) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|&id| id >= oldest);
    }
}

/// `JobFinished` for every job of `service` that has finished and was not announced on the
/// object at `path`, oldest first. The daemon's stop calls it once its workers have ended,
/// before it leaves the bus: the jobs the stop cancelled are announced while clients can still
/// hear the daemon (they had heard only its name go).
pub async fn announce_finished(
    conn: &Connection,
    service: &Service,
    path: &str,
    announced: &Announced,
) {
    let Ok(calibration) = conn.object_server().interface::<_, Calibration>(path).await else {
        return;
    };
    let jobs = service.jobs();
    for (job, status) in &jobs {
        if status.state.finished() && announced.first(*job) {
            let sent = Calibration::job_finished(
                calibration.signal_emitter(),
                *job,
                status.state.as_str(),
                &status.message,
            )
            .await;
            if let Err(e) = sent {
                tracing::warn!(error = %e, "could not emit a signal");
            }
        }
    }
    announced.forget_before(jobs.first().map_or(0, |(id, _)| *id));
}

/// Turn service events into signals on the object at `path` until the service's event channel
/// closes (one forwarder per object: the default device's events go out on both of its paths).
pub async fn forward_events(
    conn: Connection,
    service: Service,
    path: String,
    announced: Announced,
) {
    let mut events = service.subscribe();
    let server = conn.object_server();
    let Ok(bounds) = server.interface::<_, Bounds>(path.as_str()).await else {
        return;
    };
    let Ok(calibration) = server.interface::<_, Calibration>(path.as_str()).await else {
        return;
    };
    // Under a flood it fell behind 165 times a second, and the log grew by as many lines.
    let (mut lag_said, mut skipped) = (crate::log_throttle::Throttle::default(), 0u64);
    loop {
        let event = match events.recv().await {
            Ok(e) => e,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                // A flood of reports (each overrun an event) can outrun the bus: what was
                // skipped is recovered from the service's state, not dropped.
                skipped += n;
                if lag_said.due().is_some() {
                    tracing::warn!(
                        missed = std::mem::take(&mut skipped),
                        "signal forwarder fell behind; finished jobs and changed bounds are announced again from the daemon's state (progress signals skipped; said at most every 10 s, with the events skipped since)"
                    );
                }
                announce_finished(&conn, &service, &path, &announced).await;
                announce_every_kernel(&service, &bounds).await;
                continue;
            }
            Err(_) => return,
        };
        // Once per job: one a catch-up announced (finished in the daemon's state before its
        // event came through) is not announced again.
        if let Event::JobFinished { job, .. } = &event {
            if !announced.first(*job) {
                continue;
            }
        }
        if let Err(e) = emit(event, &bounds, &calibration).await {
            tracing::warn!(error = %e, "could not emit a signal");
        }
    }
}

/// One service event as its signals on the object of `bounds` and `calibration`.
async fn emit(
    event: Event,
    bounds: &zbus::object_server::InterfaceRef<Bounds>,
    calibration: &zbus::object_server::InterfaceRef<Calibration>,
) -> zbus::Result<()> {
    match event {
        Event::JobProgress { job, progress } => {
            Calibration::job_progress(calibration.signal_emitter(), job, progress).await
        }
        Event::JobFinished {
            job,
            state,
            message,
        } => {
            Calibration::job_finished(calibration.signal_emitter(), job, state.as_str(), &message)
                .await
        }
        Event::BoundsChanged { kernels } => {
            let emitter = bounds.signal_emitter();
            let iface = bounds.get().await;
            let changed = iface.stale_kernels_changed(emitter).await;
            // Health says whether stale bounds are served, so it may change with them.
            let health = iface.health_changed(emitter).await;
            Bounds::bounds_changed(emitter, kernels)
                .await
                .and(changed)
                .and(health)
        }
        Event::HealthChanged { .. } => {
            bounds
                .get()
                .await
                .health_changed(bounds.signal_emitter())
                .await
        }
    }
}

/// After the forwarder lagged (and [`announce_finished`]): `BoundsChanged` naming every kernel
/// served (any may have changed), with the `StaleKernels` and `Health` properties. A client
/// re-reads what it caches.
async fn announce_every_kernel(
    service: &Service,
    bounds: &zbus::object_server::InterfaceRef<Bounds>,
) {
    let emitter = bounds.signal_emitter();
    let iface = bounds.get().await;
    let sent = Bounds::bounds_changed(emitter, service.list_kernels())
        .await
        .and(iface.stale_kernels_changed(emitter).await)
        .and(iface.health_changed(emitter).await);
    if let Err(e) = sent {
        tracing::warn!(error = %e, "could not emit a signal");
    }
}
