//! The bus face of production monitoring: `org.wcetd.Monitor1` on every device's object as the
//! design notes fix it (`Report`, `GetObserved`, signal `BoundExceeded`) with a few extensions,
//! its client proxy, and the forwarder that turns monitoring events into signals. Thin: checks
//! who reports, forwards to the [`Service`], maps errors with [`BusError`].

use std::collections::HashMap;
use std::time::Duration;
use zbus::message::Header;
use zbus::object_server::SignalEmitter;
use zbus::{interface, proxy, Connection, OwnedVariant, Variant};

use crate::access::ReporterPolicy;
use crate::dbus::BusError;
use crate::gpu::Interference;
use crate::service::{Event, MonitorEvent, ObservedInfo, Service, ServiceError};

/// One (kernel, size) in `ListObserved`: kernel, sms, count, p50_ns, p99_ns, p999_ns, max_ns,
/// bound_ns, overruns (since calibration), overruns_total. Flat, not `GetObserved`'s dictionary
/// of 18 named variants per series: `wcetctl watch` asks for every series every 2 s.
pub type WireObserved = (String, u32, u64, u64, u64, u64, u64, u64, u64, u64);

/// Longest a report that raised a bound waits for it to be on disk before it is answered.
const SAVE_WAIT: Duration = Duration::from_secs(10);

/// `org.wcetd.Monitor1`: `Report` for root, the daemon's user and the groups `wcetd` and
/// `wcetd-report`; everything else for anyone.
pub struct Monitor {
    pub service: Service,
    /// Shared by every device's object, so each sender is looked up once.
    pub access: std::sync::Arc<ReporterPolicy>,
}

#[interface(name = "org.wcetd.Monitor1")]
impl Monitor {
    /// Launch times a scheduler observed for `kernel` on `sms` SMs, judged against the bound
    /// `GetBound` serves. Answered once recorded; a report that raised a bound is answered once
    /// that is on disk.
    async fn report(
        &self,
        kernel: &str,
        sms: u32,
        times_ns: Vec<u64>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<(), BusError> {
        self.access.check(conn, &header, "Report").await?;
        self.record(kernel, sms, None, &times_ns).await
    }

    /// `Report` for one interference tag (`isolated` or `contended`): an extension; the times are
    /// judged against `GetBoundTagged`'s bound.
    async fn report_tagged(
        &self,
        kernel: &str,
        sms: u32,
        interference: &str,
        times_ns: Vec<u64>,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<(), BusError> {
        self.access.check(conn, &header, "ReportTagged").await?;
        let tag = parse_tag(interference)?;
        self.record(kernel, sms, Some(tag), &times_ns).await
    }

    fn get_observed(
        &self,
        kernel: &str,
        sms: u32,
    ) -> Result<HashMap<String, Variant<'static>>, BusError> {
        Ok(observed_dict(&self.service.observed(kernel, sms, None)?))
    }

    /// `GetObserved` for one interference tag: an extension.
    fn get_observed_tagged(
        &self,
        kernel: &str,
        sms: u32,
        interference: &str,
    ) -> Result<HashMap<String, Variant<'static>>, BusError> {
        let tag = parse_tag(interference)?;
        Ok(observed_dict(&self.service.observed(
            kernel,
            sms,
            Some(tag),
        )?))
    }

    /// Every (kernel, size) with reported times, ascending: an extension, for `wcetctl watch`.
    fn list_observed(&self) -> Vec<WireObserved> {
        self.service
            .list_observed()
            .into_iter()
            .map(|o| {
                let q = o.quantiles;
                (
                    o.kernel,
                    o.partition_sms,
                    o.count,
                    q.p50_ns,
                    q.p99_ns,
                    q.p999_ns,
                    o.max_ns,
                    o.bound_ns,
                    o.overruns,
                    o.overruns_total,
                )
            })
            .collect()
    }

    /// Kernels with a reported time above a bound served since their last calibration.
    #[zbus(property)]
    fn overrun_kernels(&self) -> Vec<String> {
        self.service.overrun_kernels()
    }

    #[zbus(signal)]
    async fn bound_exceeded(
        emitter: &SignalEmitter<'_>,
        kernel: &str,
        sms: u32,
        observed_ns: u64,
        bound_ns: u64,
    ) -> zbus::Result<()>;
}

impl Monitor {
    async fn record(
        &self,
        kernel: &str,
        sms: u32,
        tag: Option<Interference>,
        times: &[u64],
    ) -> Result<(), BusError> {
        // On the runtime, the hot path of production: the hop to the blocking pool took Report
        // past 1.5x Ping in the load bench (1.66x). Only the rare recalibration an overrun
        // queues touches the disk synchronously (a job record, synced), so only it hops. The
        // answer waits for it, as it waits for the overrun's save: once answered, GetObserved
        // names the job.
        let outcome = self.service.report(kernel, sms, tag, times)?;
        if outcome.recalibration_wanted {
            let (service, kernel) = (self.service.clone(), kernel.to_string());
            let queued =
                tokio::task::spawn_blocking(move || service.recalibrate_after_overrun(&kernel));
            // The times are recorded either way: a failure here is the recalibration's, not
            // the report's, and is not answered as one.
            if let Err(e) = queued.await {
                tracing::warn!(error = %e, "queueing the recalibration after an overrun stopped");
            }
        }
        if let Some(generation) = outcome.save_generation {
            self.service
                .observations_saved(generation, SAVE_WAIT)
                .await?;
        }
        if let Some(seq) = outcome.journal_seq {
            self.service.floors_journalled(seq, SAVE_WAIT).await?;
        }
        Ok(())
    }
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

fn observed_dict(o: &ObservedInfo) -> HashMap<String, Variant<'static>> {
    let mut d = HashMap::new();
    let mut put = |k: &str, v: Variant<'static>| {
        d.insert(k.to_string(), v);
    };
    let time =
        |t: Option<chrono::DateTime<chrono::Utc>>| t.map_or(String::new(), |t| t.to_rfc3339());
    put("count", o.count.into());
    put("max_ns", o.max_ns.into());
    put("p50_ns", o.quantiles.p50_ns.into());
    put("p99_ns", o.quantiles.p99_ns.into());
    put("p999_ns", o.quantiles.p999_ns.into());
    put("overruns", o.overruns.into());
    put("carried", o.carried.into());
    put("bound_ns", o.bound_ns.into());
    put("partition_sms", o.partition_sms.into());
    put("headroom_ns", o.headroom_ns().into());
    put("calibration", o.calibration.clone().into());
    put("epoch_started", time(o.epoch_started).into());
    let tags: Vec<String> = o.interference.iter().map(ToString::to_string).collect();
    put("interference", tags.join(",").into());
    put("floor_ns", o.floor_ns.into());
    put("reported_total", o.reported_total.into());
    put("overruns_total", o.overruns_total.into());
    put("past_epochs", o.past_epochs.into());
    put("last_report", time(o.last_report).into());
    put("recalibration_job", o.recalibration_job.into());
    d
}

/// Turn monitoring events into `BoundExceeded` and `OverrunKernels` changes (a recalibration
/// takes a kernel off the list, so `BoundsChanged` is watched too) on the object at `path` until
/// the channels close (one forwarder per object, as [`crate::dbus::forward_events`]).
pub async fn forward_events(conn: Connection, service: Service, path: String) {
    let Ok(monitor) = conn
        .object_server()
        .interface::<_, Monitor>(path.as_str())
        .await
    else {
        return;
    };
    let mut events = service.subscribe_monitor();
    let mut bounds = service.subscribe();
    let mut overrun = service.overrun_kernels();
    // The default device's signals go out on its own path and on the root alias: what is skipped
    // is counted once, on its own path, the one alerters are told to match (operations.md).
    let mut skipped = Skipped::since(&service, path != crate::bus::OBJECT_PATH);
    loop {
        let recheck = tokio::select! {
            e = events.recv() => match e {
                Ok(MonitorEvent::BoundExceeded { seq, kernel, sms, observed_ns, bound_ns }) => {
                    skipped.saw(seq, &service);
                    let sent = Monitor::bound_exceeded(monitor.signal_emitter(), &kernel, sms, observed_ns, bound_ns).await;
                    if let Err(e) = sent {
                        tracing::warn!(error = %e, "could not emit BoundExceeded");
                    }
                    false
                }
                Ok(MonitorEvent::OverrunKernelsChanged) => true,
                // What was skipped is counted at the next `BoundExceeded` this forwarder sees
                // (the channel keeps the newest events, so after a flood of them, at once).
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => true,
                Err(_) => return,
            },
            e = bounds.recv() => match e {
                Ok(Event::BoundsChanged { .. }) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => true,
                Ok(_) => false,
                Err(_) => return,
            },
        };
        if !recheck {
            continue;
        }
        let now = service.overrun_kernels();
        if now != overrun {
            overrun = now;
            let emitter = monitor.signal_emitter();
            if let Err(e) = monitor.get().await.overrun_kernels_changed(emitter).await {
                tracing::warn!(error = %e, "could not emit an OverrunKernels change");
            }
        }
    }
}

/// The `BoundExceeded` signals one forwarder skipped, from the events' numbers: a gap is
/// signals skipped, counted exactly (a lag's own count mixes in the other events).
struct Skipped {
    /// The number of the last `BoundExceeded` seen.
    last_seq: u64,
    /// Whether this forwarder's skips go into the service's count.
    counted: bool,
    said: crate::log_throttle::Throttle,
    not_said: u64,
}

impl Skipped {
    /// Read after subscribing: an event numbered up to it may still be in the channel, and is
    /// no gap.
    fn since(service: &Service, counted: bool) -> Self {
        Skipped {
            last_seq: service.bound_exceeded_sent(),
            counted,
            said: Default::default(),
            not_said: 0,
        }
    }

    /// Event `seq` came: count the gap before it, and log it at most every 10 s.
    fn saw(&mut self, seq: u64, service: &Service) {
        let gap = seq.saturating_sub(self.last_seq + 1);
        self.last_seq = self.last_seq.max(seq);
        if gap == 0 {
            return;
        }
        if self.counted {
            service.note_bound_exceeded_skipped(gap);
        }
        self.not_said += gap;
        if self.said.due().is_some() {
            tracing::warn!(
                missed = std::mem::take(&mut self.not_said),
                "monitor signal forwarder fell behind; BoundExceeded signals were skipped (GetObserved's counts and OverrunKernels stay exact; counted in wcetd_bound_exceeded_signals_skipped_total; said at most every 10 s, with the signals skipped since)"
            );
        }
    }
}

/// Client proxy for `org.wcetd.Monitor1`.
#[proxy(
    interface = "org.wcetd.Monitor1",
    default_service = "org.wcetd.Wcetd1",
    default_path = "/org/wcetd/Wcetd1"
)]
pub trait Monitor1 {
    fn report(&self, kernel: &str, sms: u32, times_ns: &[u64]) -> zbus::Result<()>;
    fn report_tagged(
        &self,
        kernel: &str,
        sms: u32,
        interference: &str,
        times_ns: &[u64],
    ) -> zbus::Result<()>;
    fn get_observed(&self, kernel: &str, sms: u32) -> zbus::Result<HashMap<String, OwnedVariant>>;
    fn get_observed_tagged(
        &self,
        kernel: &str,
        sms: u32,
        interference: &str,
    ) -> zbus::Result<HashMap<String, OwnedVariant>>;
    fn list_observed(&self) -> zbus::Result<Vec<WireObserved>>;
    #[zbus(property)]
    fn overrun_kernels(&self) -> zbus::Result<Vec<String>>;
    #[zbus(signal)]
    fn bound_exceeded(
        &self,
        kernel: String,
        sms: u32,
        observed_ns: u64,
        bound_ns: u64,
    ) -> zbus::Result<()>;
}
