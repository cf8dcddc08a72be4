//! Bounds that watch themselves, over a private bus with the real daemon: a reported launch time
//! above the bound is signalled (`BoundExceeded`), raises the bound served at its size (and below
//! it, for a kernel that is never faster on fewer SMs), is counted, survives a crash, and shows in
//! `OverrunKernels`, `wcetctl` and the metrics file; a recalibration starts a new epoch and keeps
//! the floor; bad reports and callers outside the groups are refused with nothing recorded.

mod ops_support;
mod prom_text;

use futures_util::StreamExt;
use ops_support::*;
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;
use zbus::OwnedVariant;

const MONITOR: &str = "org.wcetd.Monitor1";
/// A kernel the simulated suite calibrates as monotone (more SMs never slower).
const KERNEL: &str = "hotspot";
const SMS: u32 = 64;

type Dict = HashMap<String, OwnedVariant>;

fn get<T: TryFrom<OwnedVariant>>(d: &Dict, key: &str) -> T {
    let v = d.get(key).unwrap_or_else(|| panic!("no `{key}` in {d:?}"));
    T::try_from(v.try_clone().unwrap()).unwrap_or_else(|_| panic!("`{key}` has the wrong type"))
}

async fn observed(conn: &zbus::Connection, kernel: &str, sms: u32) -> Dict {
    call(conn, MONITOR, "GetObserved", &(kernel, sms))
        .await
        .expect("GetObserved")
}

async fn bound(conn: &zbus::Connection, kernel: &str, sms: u32) -> u64 {
    call(conn, BOUNDS, "GetBound", &(kernel, sms))
        .await
        .expect("GetBound")
}

async fn report(
    conn: &zbus::Connection,
    kernel: &str,
    sms: u32,
    times: &[u64],
) -> Result<(), zbus::Error> {
    call::<_, ()>(conn, MONITOR, "Report", &(kernel, sms, times)).await
}

async fn overrun_kernels(conn: &zbus::Connection) -> Vec<String> {
    let props = zbus::fdo::PropertiesProxy::builder(conn)
        .destination(NAME)
        .path(PATH)
        .build()
        .await
        .unwrap();
    let iface = zbus::names::InterfaceName::from_static_str_unchecked(MONITOR);
    let v = props
        .get(iface, "OverrunKernels")
        .await
        .expect("OverrunKernels");
    Vec::<String>::try_from(v).unwrap()
}

/// Whether the stored calibration says `kernel` is never faster on fewer SMs.
fn stored_monotone(state: &Path, kernel: &str) -> bool {
    let file = files_containing(state, "calibration-");
    let cal: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.join(&file[0])).unwrap()).unwrap();
    cal["kernels"][kernel]["table"]["monotone"]
        .as_bool()
        .expect("table.monotone")
}

/// A stream of one signal of `MONITOR`, subscribed before anything that could send it.
async fn signals(conn: &zbus::Connection, member: &'static str) -> zbus::MessageStream {
    let rule = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        // The default device is served at two paths, each signalling: one is heard.
        .path(wcetd::bus::OBJECT_PATH)
        .interface(MONITOR)
        .member(member)
        .build()
        .expect("match rule");
    zbus::MessageStream::for_match_rule(rule, conn, None)
        .await
        .expect("match rule")
}

fn wcetctl(address: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wcetctl"))
        .args(["--bus-address", address])
        .args(args)
        .output()
        .expect("running wcetctl");
    assert!(
        out.status.success(),
        "wcetctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The metrics file, checked: well formed, and by promtool where it is installed.
fn metrics(path: &Path) -> prom_text::Exposition {
    let text = std::fs::read_to_string(path).expect("the metrics file");
    let exp = prom_text::check(&text)
        .unwrap_or_else(|e| panic!("metrics file is not well formed: {e}\n{text}"));
    match prom_text::promtool(&text) {
        Some(r) => r.unwrap_or_else(|e| panic!("promtool check metrics: {e}")),
        None => println!("note: promtool not installed; checked with the built-in parser only"),
    }
    exp
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overrun_is_signalled_raises_the_bound_is_counted_and_survives_a_crash() {
    tokio::time::timeout(Duration::from_secs(110), async {
        let fx = Fixture::new();
        let conn = fx.connect().await;
        calibrate_state(&fx).await;
        assert!(
            stored_monotone(&fx.state(), KERNEL),
            "{KERNEL} should be calibrated as monotone"
        );
        let prom = fx.dir.path().join("wcetd.prom");
        let flags = ["--metrics-file", prom.to_str().unwrap()];
        let mut d = Daemon::spawn(fx.address(), &fx.state(), &flags);
        wait_for_daemon(&conn, &mut d).await;
        // Written before the name was owned.
        let before = metrics(&prom);
        let sizes = wcetd::client::BoundsProxy::new(&conn)
            .await
            .unwrap()
            .partition_sizes()
            .await
            .unwrap();
        let old: Vec<(u32, u64)> = call(&conn, BOUNDS, "GetCurve", &(KERNEL,)).await.unwrap();
        let served = bound(&conn, KERNEL, SMS).await;
        let seconds = |ns: u64| ns as f64 / 1e9;
        assert_eq!(
            before.value("wcetd_bound_seconds", &[("kernel", KERNEL), ("sms", "64")]),
            Some(seconds(served))
        );
        assert_eq!(
            before.value("wcetd_overruns_total", &[("kernel", KERNEL), ("sms", "64")]),
            Some(0.0)
        );

        let mut exceeded = signals(&conn, "BoundExceeded").await;
        let late = served + served / 5 + 7;
        report(&conn, KERNEL, SMS, &[served / 2, served - 1, late])
            .await
            .expect("Report");

        let msg = tokio::time::timeout(WAIT, exceeded.next())
            .await
            .expect("BoundExceeded in time")
            .unwrap()
            .unwrap();
        let (kernel, sms, observed_ns, bound_ns): (String, u32, u64, u64) =
            msg.body().deserialize().unwrap();
        assert_eq!(
            (kernel.as_str(), sms, observed_ns, bound_ns),
            (KERNEL, SMS, late, served)
        );

        // Raised at its size, and below it (never faster on fewer SMs); untouched above it.
        assert_eq!(bound(&conn, KERNEL, SMS).await, late);
        let new: Vec<(u32, u64)> = call(&conn, BOUNDS, "GetCurve", &(KERNEL,)).await.unwrap();
        for ((m, before), (_, after)) in old.iter().zip(&new) {
            match m.cmp(&SMS) {
                std::cmp::Ordering::Greater => assert_eq!(after, before, "{m} SMs"),
                _ => assert_eq!(*after, (*before).max(late), "{m} SMs"),
            }
        }
        assert!(
            new.windows(2).all(|w| w[0].1 >= w[1].1),
            "the curve stays non-increasing: {new:?}"
        );
        assert_eq!(new.len(), sizes.len());
        let info: Dict = call(&conn, BOUNDS, "GetBoundInfo", &(KERNEL, SMS))
            .await
            .unwrap();
        assert_eq!(get::<String>(&info, "basis"), "observed");
        assert_eq!(get::<u64>(&info, "observed_floor_ns"), late);
        assert!(
            get::<String>(&info, "notes").contains("reported from production"),
            "{info:?}"
        );
        let below: Dict = call(&conn, BOUNDS, "GetBoundInfo", &(KERNEL, 8u32))
            .await
            .unwrap();
        assert_eq!(get::<u64>(&below, "observed_floor_ns"), late);

        let o = observed(&conn, KERNEL, SMS).await;
        assert_eq!(get::<u64>(&o, "count"), 3);
        assert_eq!(get::<u64>(&o, "overruns"), 1);
        assert_eq!(
            get::<u64>(&o, "max_ns"),
            late,
            "the exact maximum, not the histogram's"
        );
        assert_eq!(get::<u64>(&o, "bound_ns"), late);
        // So headroom is 0 after an overrun, not negative (docs/api.md): alert on overruns.
        assert_eq!(get::<i64>(&o, "headroom_ns"), 0);
        assert!(
            get::<u64>(&o, "p50_ns") >= served - 1
                && get::<u64>(&o, "p50_ns") <= (served - 1) + (served - 1) / 1000 + 1
        );
        assert!(get::<u64>(&o, "p999_ns") <= late);
        assert_eq!(overrun_kernels(&conn).await, vec![KERNEL.to_string()]);

        let status = wcetctl(fx.address(), &["status"]);
        assert!(
            status.contains("overruns") && status.contains(KERNEL),
            "{status}"
        );
        let table = wcetctl(fx.address(), &["observed", KERNEL, "64"]);
        assert!(
            table.contains(&late.to_string()) && table.contains(" !"),
            "{table}"
        );
        let watch = wcetctl(fx.address(), &["watch", "--once"]);
        assert!(
            watch.contains(KERNEL) && !watch.contains("\x1b["),
            "not a terminal, so no escapes:\n{watch}"
        );
        let json = wcetctl(
            fx.address(),
            &["--json", "watch", "--count", "2", "--interval", "0.05"],
        );
        assert_eq!(json.lines().count(), 2, "{json}");
        // watch's flat list has no floor: no made-up 0 in its place; observed has the true one.
        let snapshot: serde_json::Value =
            serde_json::from_str(json.lines().next().unwrap()).unwrap();
        let row = &snapshot["observed"][0];
        assert_eq!(row["max_ns"], late, "{json}");
        assert!(
            row.get("floor_ns").is_none() && row.get("carried").is_none(),
            "{json}"
        );
        let one = wcetctl(fx.address(), &["--json", "observed", KERNEL, "64"]);
        let rows: serde_json::Value = serde_json::from_str(&one).unwrap();
        assert_eq!(rows[0]["floor_ns"], late, "{one}");

        let log = d.log_text();
        assert!(
            log.contains("a reported launch time exceeds the bound served"),
            "{log}"
        );
        // A crash right after Report returned: the raise was on disk before it returned.
        d.kill9();
        let mut d = Daemon::spawn(fx.address(), &fx.state(), &flags);
        wait_for_daemon(&conn, &mut d).await;
        assert_eq!(bound(&conn, KERNEL, SMS).await, late);
        assert_eq!(bound(&conn, KERNEL, 8).await, old[0].1.max(late));
        let o = observed(&conn, KERNEL, SMS).await;
        assert_eq!(
            (get::<u64>(&o, "count"), get::<u64>(&o, "overruns")),
            (3, 1)
        );
        assert_eq!(overrun_kernels(&conn).await, vec![KERNEL.to_string()]);
        // Written at start and again at a clean stop.
        d.stop();
        let after = metrics(&prom);
        let at64 = [("kernel", KERNEL), ("sms", "64")];
        assert_eq!(after.value("wcetd_overruns_total", &at64), Some(1.0));
        assert_eq!(
            after.value("wcetd_reported_launches_total", &at64),
            Some(3.0)
        );
        assert_eq!(
            after.value("wcetd_bound_seconds", &at64),
            Some(seconds(late))
        );
        assert_eq!(
            after.value("wcetd_observed_max_seconds", &at64),
            Some(seconds(late))
        );
        assert_eq!(
            after.value("wcetd_overrun_since_calibration", &[("kernel", KERNEL)]),
            Some(1.0)
        );
        assert_eq!(after.value("wcetd_health", &[("state", "ok")]), Some(1.0));
        for s in &after.samples {
            assert_eq!(s.labels.get("gpu").map(String::as_str), Some("0"), "{s:?}");
            assert!(
                s.labels.get("UUID").is_some_and(|u| u.starts_with("SIM-")),
                "{s:?}"
            );
        }

        // A flood of rising times overruns at every report: each is counted, but the log says
        // so at most every 10 s per kernel (log_throttle.rs); it had a line per report.
        let mut d = Daemon::spawn(fx.address(), &fx.state(), &flags);
        wait_for_daemon(&conn, &mut d).await;
        let flood = 40;
        let started = std::time::Instant::now();
        for i in 1..=flood {
            report(&conn, KERNEL, SMS, &[late + i])
                .await
                .expect("Report");
        }
        let elapsed = started.elapsed();
        let o = observed(&conn, KERNEL, SMS).await;
        assert_eq!(
            get::<u64>(&o, "overruns"),
            1 + flood,
            "every overrun counted"
        );
        let said = d
            .log_text()
            .matches("a reported launch time exceeds the bound served")
            .count() as u64;
        assert!(
            said >= 1 && said <= 1 + elapsed.as_secs() / 10,
            "{said} overrun lines for {flood} overruns in {elapsed:?}"
        );
        d.stop();
    })
    .await
    .expect("test ran past its time limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_reports_are_refused_and_record_nothing() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let fx = Fixture::new();
        let conn = fx.connect().await;
        let mut d = Daemon::spawn(fx.address(), &fx.state(), &[]);
        wait_for_daemon(&conn, &mut d).await;
        wait_for_job(&conn, 1).await;
        let too_many = vec![1000u64; 65_537];
        let cases: [(&str, u32, Vec<u64>, &str); 7] = [
            (
                "nosuchkernel",
                64,
                vec![1000],
                "org.wcetd.Error.UnknownKernel",
            ),
            ("", 64, vec![1000], "org.freedesktop.DBus.Error.InvalidArgs"),
            (KERNEL, 12, vec![1000], "org.wcetd.Error.InvalidPartition"),
            (KERNEL, 0, vec![1000], "org.wcetd.Error.InvalidPartition"),
            (
                KERNEL,
                64,
                vec![1000, 0, 2000],
                "org.freedesktop.DBus.Error.InvalidArgs",
            ),
            (KERNEL, 64, vec![], "org.freedesktop.DBus.Error.InvalidArgs"),
            (
                KERNEL,
                64,
                too_many,
                "org.freedesktop.DBus.Error.InvalidArgs",
            ),
        ];
        for (kernel, sms, times, want) in &cases {
            let r = report(&conn, kernel, *sms, times).await;
            assert_eq!(
                &error_name(&r),
                want,
                "Report({kernel:?}, {sms}, {} times)",
                times.len()
            );
        }
        // Which time was wrong, by its index in the call and in words.
        let zero = report(&conn, KERNEL, 64, &[1000, 0, 2000])
            .await
            .unwrap_err();
        assert!(
            zero.to_string().contains("times[1] (the 2nd) is 0 ns"),
            "{zero}"
        );
        let hour_and_more = [3_600_000_000_001u64];
        assert_eq!(
            error_name(&report(&conn, KERNEL, 64, &hour_and_more).await),
            "org.freedesktop.DBus.Error.InvalidArgs"
        );
        let tagged: Result<(), _> = call(
            &conn,
            MONITOR,
            "ReportTagged",
            &(KERNEL, 64u32, "noisy", vec![1000u64]),
        )
        .await;
        assert_eq!(
            error_name(&tagged),
            "org.freedesktop.DBus.Error.InvalidArgs"
        );
        let message = match report(&conn, KERNEL, 64, &[]).await {
            Err(zbus::Error::FDO(e)) => zbus::DBusError::description(&*e).unwrap_or("").to_string(),
            other => panic!("{other:?}"),
        };
        assert!(
            message.contains("accepted"),
            "the refusal says what is accepted: {message}"
        );

        let listed: Vec<wcetd::monitor_bus::WireObserved> =
            call(&conn, MONITOR, "ListObserved", &()).await.unwrap();
        assert!(
            listed.is_empty(),
            "a refused report recorded something: {listed:?}"
        );
        let o = observed(&conn, KERNEL, 64).await;
        assert_eq!(
            (get::<u64>(&o, "count"), get::<u64>(&o, "reported_total")),
            (0, 0)
        );
        assert!(overrun_kernels(&conn).await.is_empty());
        // The limit itself is accepted.
        report(&conn, KERNEL, 64, &vec![1000u64; 65_536])
            .await
            .expect("65,536 times");
        assert_eq!(
            get::<u64>(&observed(&conn, KERNEL, 64).await, "count"),
            65_536
        );
        d.stop();
    })
    .await
    .expect("test ran past its time limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recalibration_after_an_overrun_starts_a_new_epoch_and_keeps_the_floor() {
    tokio::time::timeout(Duration::from_secs(110), async {
        let fx = Fixture::new();
        let conn = fx.connect().await;
        calibrate_state(&fx).await;
        let flags = [
            "--recalibrate-on-overrun",
            "--overrun-recalibration-interval",
            "3600",
            "--seed",
            "2",
        ];
        let mut d = Daemon::spawn(fx.address(), &fx.state(), &flags);
        wait_for_daemon(&conn, &mut d).await;
        let kernel = "bfs";
        let served = bound(&conn, kernel, SMS).await;
        let late = served * 2;
        report(&conn, kernel, SMS, &[late]).await.expect("Report");
        let o = observed(&conn, kernel, SMS).await;
        let job: u64 = get(&o, "recalibration_job");
        assert!(job > 0, "an overrun queues a recalibration: {o:?}");
        let (state, message) = wait_for_job(&conn, job).await;
        assert_eq!(state, "done", "{message}");

        // The new calibration judges new times; the old epoch is kept; the floor stays.
        let o = observed(&conn, kernel, SMS).await;
        assert_eq!(
            (get::<u64>(&o, "count"), get::<u64>(&o, "overruns")),
            (0, 0)
        );
        assert_eq!(get::<u32>(&o, "past_epochs"), 1);
        assert_eq!(
            (
                get::<u64>(&o, "reported_total"),
                get::<u64>(&o, "overruns_total")
            ),
            (1, 1)
        );
        assert!(bound(&conn, kernel, SMS).await >= late);
        assert!(
            overrun_kernels(&conn).await.is_empty(),
            "a recalibrated kernel has no overrun against its new bounds"
        );

        // A second overrun within the interval queues nothing more.
        let served = bound(&conn, kernel, SMS).await;
        report(&conn, kernel, SMS, &[served + 1])
            .await
            .expect("Report");
        let o = observed(&conn, kernel, SMS).await;
        assert_eq!(get::<u64>(&o, "recalibration_job"), job);
        assert_eq!(
            (get::<u64>(&o, "count"), get::<u64>(&o, "overruns")),
            (1, 1)
        );
        assert_eq!(overrun_kernels(&conn).await, vec![kernel.to_string()]);
        let log = d.log_text();
        assert_eq!(
            log.matches("recalibration queued after an overrun").count(),
            1,
            "{log}"
        );
        d.stop();
    })
    .await
    .expect("test ran past its time limit");
}

/// Times reported for a kernel with no bound yet are the floor of the bound it will get: they
/// are on disk before the report is answered, so a crash right after it (during a first
/// calibration, say) cannot let the next calibration serve a bound below them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn times_reported_before_any_calibration_survive_a_crash() {
    tokio::time::timeout(Duration::from_secs(110), async {
        let fx = Fixture::new();
        let conn = fx.connect().await;
        // A long save interval: only a save made before the answer can keep them.
        let flags = [
            "--no-initial-calibration",
            "--observation-save-interval",
            "60",
        ];
        let mut d = Daemon::spawn(fx.address(), &fx.state(), &flags);
        wait_for_daemon(&conn, &mut d).await;
        let late: [(&str, u64); 2] = [("bfs", 7_000_000), ("needle", 6_000_000)];
        report(&conn, "bfs", 40, &[late[0].1])
            .await
            .expect("Report");
        // The same from the command line, which shows what is recorded there now.
        let out = wcetctl(fx.address(), &["report", "needle", "40", "6000000"]);
        assert!(
            out.contains("reported 1 launch time of needle at 40 SMs") && out.contains("6000000"),
            "{out}"
        );
        d.kill9();
        let mut d = Daemon::spawn(fx.address(), &fx.state(), &flags);
        wait_for_daemon(&conn, &mut d).await;
        // GetObserved names the floor the first bound will stand on (it said 0 with no bound).
        // With no bound served, bound_ns is 0 and headroom minus the largest time: the one
        // case where it is negative (docs/api.md).
        for (kernel, time) in late {
            let info = observed(&conn, kernel, 40).await;
            assert_eq!(get::<u64>(&info, "floor_ns"), time, "{kernel}");
            assert_eq!(get::<u64>(&info, "bound_ns"), 0, "{kernel}");
            assert_eq!(get::<i64>(&info, "headroom_ns"), -(time as i64), "{kernel}");
        }
        let calibration = wcetd::client::CalibrationProxy::new(&conn).await.unwrap();
        let job = calibration.recalibrate(&["bfs", "needle"]).await.unwrap();
        let (state, message) = wait_for_job(&conn, job).await;
        assert_eq!(state, "done", "{message}");
        for (kernel, time) in late {
            assert!(bound(&conn, kernel, 40).await >= time, "{kernel}");
        }
        d.stop();
    })
    .await
    .expect("test ran past its time limit");
}

/// A time below the bounds served, with no recalibration due, raises only a floor. The floor is
/// journalled before the answer, so a `kill -9` right after it loses only the histogram: the
/// next run holds every later bound at that size up to it. (Before the journal it waited for the
/// periodic save, here a minute away, and was lost.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_floor_below_current_bounds_survives_a_crash() {
    tokio::time::timeout(Duration::from_secs(90), async {
        let fx = Fixture::new();
        let conn = fx.connect().await;
        calibrate_state(&fx).await;
        let flags = ["--observation-save-interval", "60"];
        let mut d = Daemon::spawn(fx.address(), &fx.state(), &flags);
        wait_for_daemon(&conn, &mut d).await;
        // An overrun is saved before it is answered, so the next save is a minute away.
        let over = bound(&conn, KERNEL, SMS).await + 1_000;
        report(&conn, KERNEL, SMS, &[over]).await.expect("Report");
        // At a larger size, which a floor at 64 SMs does not hold up.
        let larger = wcetd::client::BoundsProxy::new(&conn)
            .await
            .unwrap()
            .partition_sizes()
            .await
            .unwrap()
            .into_iter()
            .max()
            .unwrap();
        assert!(larger > SMS);
        let time = bound(&conn, KERNEL, larger).await / 2;
        report(&conn, KERNEL, larger, &[time])
            .await
            .expect("Report");
        d.kill9();
        let mut d = Daemon::spawn(fx.address(), &fx.state(), &flags);
        wait_for_daemon(&conn, &mut d).await;
        let after = observed(&conn, KERNEL, larger).await;
        assert_eq!(get::<u64>(&after, "floor_ns"), time);
        assert_eq!(
            get::<u64>(&after, "count"),
            0,
            "the histogram waits for a save"
        );
        d.stop();
        assert_eq!(
            files_containing(&fx.state(), ".floors"),
            Vec::<String>::new(),
            "the save at shutdown holds the journal's floors"
        );
    })
    .await
    .expect("test ran past its time limit");
}

/// A journal (or observations file) that exists but cannot be read is not absent: the daemon
/// refuses to start and names it, rather than serve bounds below times it recorded and delete
/// the journal at its next save. Once readable again, every floor is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_journal_stops_the_start_and_loses_nothing() {
    tokio::time::timeout(Duration::from_secs(90), async {
        let fx = Fixture::new();
        let conn = fx.connect().await;
        calibrate_state(&fx).await;
        let flags = ["--observation-save-interval", "60"];
        let mut d = Daemon::spawn(fx.address(), &fx.state(), &flags);
        wait_for_daemon(&conn, &mut d).await;
        // The first report makes the file (saved before the answer); the next is journalled.
        let first = bound(&conn, KERNEL, SMS).await / 3;
        report(&conn, KERNEL, SMS, &[first]).await.expect("Report");
        let time = bound(&conn, KERNEL, SMS).await / 2;
        report(&conn, KERNEL, SMS, &[time]).await.expect("Report");
        d.kill9();
        let journal = files_containing(&fx.state(), ".floors");
        assert_eq!(
            journal.len(),
            1,
            "journalled before the answer: {journal:?}"
        );
        let journal = fx.state().join(&journal[0]);
        // Unreadable for root too: the journal moved into a directory of its name.
        let kept = fx.state().join("journal-kept");
        std::fs::rename(&journal, &kept).unwrap();
        std::fs::create_dir(&journal).unwrap();

        let mut d = Daemon::spawn(fx.address(), &fx.state(), &flags);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = d.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "wcetd started on an unreadable journal; log:\n{}",
                d.log_text()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert!(!status.success(), "{status}");
        let log = d.log_text();
        assert!(
            log.contains(".floors cannot be read") && log.contains("start again"),
            "{log}"
        );

        std::fs::remove_dir(&journal).unwrap();
        std::fs::rename(&kept, &journal).unwrap();
        let mut d = Daemon::spawn(fx.address(), &fx.state(), &flags);
        wait_for_daemon(&conn, &mut d).await;
        assert_eq!(
            get::<u64>(&observed(&conn, KERNEL, SMS).await, "floor_ns"),
            time
        );
        d.stop();
    })
    .await
    .expect("test ran past its time limit");
}

/// With several GPUs every log line about one of them says which: job numbers are per GPU.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_lines_name_their_gpu() {
    tokio::time::timeout(Duration::from_secs(90), async {
        let fx = Fixture::new();
        let conn = fx.connect().await;
        // Paced, so that each GPU's first job is still running when the next is queued.
        let flags = ["--sim-devices", "2", "--sim-pace-us", "1000"];
        let mut d = Daemon::spawn(fx.address(), &fx.state(), &flags);
        wait_for_daemon(&conn, &mut d).await;
        let log = d.log_text();
        for n in [0, 1] {
            let queued = format!("gpu{{n={n}}}: wcetd::service::jobs: recalibration queued job=1");
            assert!(log.contains(&queued), "{queued} in\n{log}");
        }
        // A job cancelled before it started ends outside the worker: its line named no GPU.
        let gpu1 = "/org/wcetd/Wcetd1/gpu/1";
        let job: u64 = conn
            .call_method(
                Some(NAME),
                gpu1,
                Some(CALIBRATION),
                "Recalibrate",
                &(vec!["lud"],),
            )
            .await
            .expect("Recalibrate")
            .body()
            .deserialize()
            .unwrap();
        conn.call_method(Some(NAME), gpu1, Some(CALIBRATION), "CancelJob", &(job,))
            .await
            .expect("CancelJob");
        d.stop();
        let ended = format!("gpu{{n=1}}: wcetd::service::worker: job finished job={job}");
        let log = d.log_text();
        assert!(log.contains(&ended), "{ended} in\n{log}");
    })
    .await
    .expect("test ran past its time limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_observations_file_is_moved_aside_and_the_daemon_serves_on() {
    tokio::time::timeout(Duration::from_secs(90), async {
        let fx = Fixture::new();
        let conn = fx.connect().await;
        calibrate_state(&fx).await;
        let mut d = Daemon::spawn(fx.address(), &fx.state(), &[]);
        wait_for_daemon(&conn, &mut d).await;
        let served = bound(&conn, KERNEL, SMS).await;
        report(&conn, KERNEL, SMS, &[served / 2])
            .await
            .expect("Report");
        d.stop();
        let file = files_containing(&fx.state(), "observations-");
        assert_eq!(file.len(), 1, "saved at shutdown: {file:?}");
        let path = fx.state().join(&file[0]);
        let text = std::fs::read(&path).unwrap();
        std::fs::write(&path, &text[..text.len() / 2]).unwrap();

        let mut d = Daemon::spawn(fx.address(), &fx.state(), &[]);
        wait_for_daemon(&conn, &mut d).await;
        assert_eq!(
            bound(&conn, KERNEL, SMS).await,
            served,
            "bounds are served as before"
        );
        assert_eq!(files_containing(&fx.state(), ".corrupt-").len(), 1);
        assert!(
            d.log_text()
                .contains("observations file is corrupt; moved aside"),
            "{}",
            d.log_text()
        );
        report(&conn, KERNEL, SMS, &[served / 3])
            .await
            .expect("reports are taken again");
        assert_eq!(get::<u64>(&observed(&conn, KERNEL, SMS).await, "count"), 1);
        d.stop();
    })
    .await
    .expect("test ran past its time limit");
}

/// `wcetctl watch` waits for a daemon that restarts, as top would, instead of ending with a raw
/// D-Bus error; the snapshots go on when it is back. `--count 0` is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_waits_for_a_daemon_that_restarts() {
    use std::io::BufRead;
    tokio::time::timeout(Duration::from_secs(120), async {
        let fx = Fixture::new();
        let conn = fx.connect().await;
        let flags = ["--no-initial-calibration"];
        let mut d = Daemon::spawn(fx.address(), &fx.state(), &flags);
        wait_for_daemon(&conn, &mut d).await;
        let mut watch = std::process::Command::new(env!("CARGO_BIN_EXE_wcetctl"))
            .args(["--bus-address", fx.address()])
            .args(["--json", "watch", "--interval", "0.05"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Read on a thread of its own: a blocking read here could not be cut short by the
        // test's time limit.
        let lines = std::io::BufReader::new(watch.stdout.take().unwrap()).lines();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || lines.map_while(Result::ok).try_for_each(|l| tx.send(l)));
        let next = || -> serde_json::Value {
            let line = rx
                .recv_timeout(Duration::from_secs(60))
                .expect("a line from watch");
            serde_json::from_str(&line).unwrap()
        };
        assert!(next().get("observed").is_some(), "a snapshot first");
        d.stop();
        // Snapshots until the daemon is gone, then a line that says so.
        while next().get("error").is_none() {}
        let mut d = Daemon::spawn(fx.address(), &fx.state(), &flags);
        wait_for_daemon(&conn, &mut d).await;
        // Waiting lines until the daemon is back, then snapshots again.
        while next().get("observed").is_none() {}
        assert!(watch.try_wait().unwrap().is_none(), "watch still runs");
        watch.kill().unwrap();
        watch.wait().unwrap();
        let zero = std::process::Command::new(env!("CARGO_BIN_EXE_wcetctl"))
            .args(["--bus-address", fx.address(), "watch", "--count", "0"])
            .output()
            .unwrap();
        assert_eq!(zero.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&zero.stderr).contains("--count 0; accepted"));
        d.stop();
    })
    .await
    .expect("test ran past its time limit");
}
