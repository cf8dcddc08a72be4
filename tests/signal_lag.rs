//! The bus forwarders after they fall behind a flood: what they skip is recovered from the
//! daemon's state (finished jobs, changed bounds) or counted (`BoundExceeded`), never lost
//! silently.
//!
//! In process, on a real private `dbus-daemon`: the service, its objects and both forwarders run
//! on this test's single-threaded runtime, so while the test does not yield, the forwarders
//! cannot run, and the events a job and a flood of reports send pile up past the channels'
//! capacity: the lag is made, not hoped for.

use std::num::NonZeroUsize;
use std::time::Duration;

use futures_util::StreamExt;
use wcetd::access::{OperatorPolicy, ReporterPolicy};
use wcetd::bus::{device_path, PrivateBus, BUS_NAME};
use wcetd::gpu::sim::{DeviceProfile, SimGpu, SimOptions};
use wcetd::service::{Service, ServiceConfig};
use wcetd::store::Store;

/// Reports in the flood: more than the event channels hold (1,024), each an overrun.
const FLOOD: u64 = 1_500;
const SMS: u32 = 64;

/// A service with short campaigns on the simulated H200, nothing calibrated at start.
fn service(state: &std::path::Path) -> Service {
    let mut config = ServiceConfig::default();
    config.recipe.campaign.launches = 40;
    config.recipe.campaign.screen_launches = 200;
    config.recipe.campaign.heavy_tail_launches = 400;
    config.recipe.delay_probe_launches = 0;
    config.initial_calibration = false;
    let gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
    Service::start(Box::new(gpu), Store::open(state).unwrap(), config).0
}

/// One signal from the daemon's object, as the test reads it.
#[derive(Debug, PartialEq)]
enum Signal {
    JobFinished(u64),
    BoundsChanged(Vec<String>),
    BoundExceeded,
    Other,
}

fn parse(msg: &zbus::Message) -> Signal {
    let header = msg.header();
    match header.member().map(|m| m.as_str()) {
        Some("JobFinished") => {
            Signal::JobFinished(msg.body().deserialize::<(u64, String, String)>().unwrap().0)
        }
        Some("BoundsChanged") => Signal::BoundsChanged(msg.body().deserialize().unwrap()),
        Some("BoundExceeded") => Signal::BoundExceeded,
        _ => Signal::Other,
    }
}

/// Block this thread (and so the forwarders, on this runtime) until `job` has finished.
fn wait_blocking(service: &Service, job: u64) {
    let service = service.clone();
    std::thread::spawn(move || {
        let mut events = service.subscribe();
        while !service.job(job).unwrap().state.finished() {
            let _ = events.blocking_recv();
        }
    })
    .join()
    .unwrap();
}

#[tokio::test]
async fn forwarders_that_fall_behind_announce_what_they_skipped_or_count_it() {
    tokio::time::timeout(Duration::from_secs(120), async {
        let dir = tempfile::tempdir().unwrap();
        let bus = PrivateBus::start(&dir.path().join("bus")).expect("private dbus-daemon");
        let service = service(&dir.path().join("state"));
        let conn = zbus::connection::Builder::address(bus.address())
            .name(BUS_NAME)
            .build()
            .await
            .unwrap();
        let operators = OperatorPolicy::new("wcetd");
        let reporters = ReporterPolicy::new(operators.clone(), "wcetd-report");
        let devices = [(0, service.clone())];
        wcetd::dbus::serve_devices(&conn, &devices, 0, operators, reporters)
            .await
            .unwrap();
        // The device's own path, where skipped signals are counted.
        let path = device_path(0);
        let announced = wcetd::dbus::Announced::default();
        tokio::spawn(wcetd::dbus::forward_events(
            conn.clone(),
            service.clone(),
            path.clone(),
            announced,
        ));
        tokio::spawn(wcetd::monitor_bus::forward_events(
            conn.clone(),
            service.clone(),
            path.clone(),
        ));

        // Every signal of the object, in the order sent, on a queue that cannot fill.
        let client = zbus::connection::Builder::address(bus.address())
            .build()
            .await
            .unwrap();
        let rule = zbus::MatchRule::builder()
            .msg_type(zbus::message::Type::Signal)
            .path(path.as_str())
            .build()
            .unwrap();
        let queue = NonZeroUsize::new(100_000);
        let mut signals = zbus::MessageStream::for_match_rule(rule, &client, queue)
            .await
            .unwrap();
        let mut until_finished = async |job: u64| {
            let mut seen = Vec::new();
            while let Some(msg) = signals.next().await {
                let signal = parse(&msg.unwrap());
                let last = signal == Signal::JobFinished(job);
                seen.push(signal);
                if last {
                    return seen;
                }
            }
            panic!("the signal stream ended");
        };

        // needle is calibrated and announced: both forwarders now wait on their channels.
        let first = service.recalibrate(&["needle".to_string()]).unwrap();
        until_finished(first).await;
        let bound = service.bound("needle", SMS, None).unwrap();

        // lud is calibrated while the forwarders cannot run; then the flood pushes its events,
        // JobFinished and BoundsChanged among them, out of the channels.
        let second = service.recalibrate(&["lud".to_string()]).unwrap();
        wait_blocking(&service, second);
        for i in 0..FLOOD {
            let outcome = service
                .report("needle", SMS, None, &[2 * bound + i])
                .unwrap();
            assert_eq!(
                outcome.overruns, 1,
                "each time of the flood is above the last"
            );
        }

        // A third job (of another kernel: needle keeps its overruns) marks the end: the bus forwarder sends its JobFinished after whatever it
        // announced for the others.
        let third = service.recalibrate(&["hotspot".to_string()]).unwrap();
        let seen = until_finished(third).await;
        let finished_second = seen
            .iter()
            .filter(|s| **s == Signal::JobFinished(second))
            .count();
        assert_eq!(
            finished_second, 1,
            "the job finished during the lag is announced once"
        );
        assert!(
            seen.iter()
                .any(|s| matches!(s, Signal::BoundsChanged(k) if k.contains(&"lud".to_string()))),
            "lud's new bounds are announced though their event was skipped"
        );

        // Every overrun is either a signal or counted as skipped, and some were skipped.
        let mut exceeded = seen.iter().filter(|s| **s == Signal::BoundExceeded).count() as u64;
        while exceeded + service.bound_exceeded_skipped() < FLOOD {
            let msg = signals
                .next()
                .await
                .expect("the signal stream ended")
                .unwrap();
            exceeded += u64::from(parse(&msg) == Signal::BoundExceeded);
        }
        let skipped = service.bound_exceeded_skipped();
        assert_eq!(
            exceeded + skipped,
            FLOOD,
            "{exceeded} signalled, {skipped} skipped"
        );
        assert!(skipped > 0, "the flood outran the channel");
        assert!(service.overrun_kernels().contains(&"needle".to_string()));
    })
    .await
    .expect("test ran past its time limit");
}
