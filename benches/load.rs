//! Load generator: the real `wcetd` binary on a private bus, 64 concurrent clients (one zbus
//! connection each) calling `GetBound` and, in the same run, the no-op `Ping`, so the cost of a
//! bound can be read against the cost of the bus itself. Then the daemon's resident memory with
//! 1,000 stored kernels. Then production monitoring: `Monitor1.Report` of 100 times from 64
//! clients against `Ping` on the same bus, and the daemon's resident memory once 1,000 kernels x
//! 17 sizes hold histograms. Prints the numbers and whether each target holds; bounded in calls
//! and time, unix sockets only. Run: `cargo bench --bench load`.

use hdrhistogram::Histogram;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use wcetd::bus::PrivateBus;
use wcetd::store::{Calibration, Origin, Store};
use zbus::Connection;

const NAME: &str = "org.wcetd.Wcetd1";
const PATH: &str = "/org/wcetd/Wcetd1";
const BOUNDS: &str = "org.wcetd.Bounds1";
const MONITOR: &str = "org.wcetd.Monitor1";
/// Realisable sizes the load calls at (`Report` takes only realisable ones).
const SIZES: [u32; 6] = [8, 16, 40, 64, 96, 128];
/// Times per `Report` call.
const REPORT_TIMES: usize = 100;
/// Per size in `SIZES`: the 100 times every `Report` of the load sends, below the bound so that
/// the load measures the common path (an overrun also waits for a save).
static REPORTED: OnceLock<Vec<Vec<u64>>> = OnceLock::new();
const CLIENTS: usize = 64;
const CALLS_PER_CLIENT: usize = 400;
const DEADLINE: Duration = Duration::from_secs(120);

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(bus: &str, state: &Path, extra: &[&str]) -> Daemon {
    Daemon(
        Command::new(env!("CARGO_BIN_EXE_wcetd"))
            .args([
                "--backend",
                "sim",
                "--launches",
                "100",
                "--bus-address",
                bus,
                "--state-dir",
            ])
            .arg(state)
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting wcetd"),
    )
}

async fn connect(bus: &str) -> Connection {
    zbus::connection::Builder::address(bus)
        .build()
        .await
        .expect("connecting")
}

async fn wait_ready(conn: &Connection, daemon: &mut Daemon) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        assert!(daemon.0.try_wait().unwrap().is_none(), "wcetd exited early");
        let r = conn
            .call_method(Some(NAME), PATH, Some(BOUNDS), "GetBound", &("bfs", 132u32))
            .await;
        if r.is_ok() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "wcetd not calibrated in time: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

struct Run {
    calls_per_s: f64,
    hist: Histogram<u64>,
    errors: u64,
}

/// Rounds of `Ping` and `Report` taken in turn, so that both see the same machine: on a shared
/// 2-core VM the bus's own speed drifts by half between runs a minute apart.
const ALTERNATING_ROUNDS: usize = 4;

/// `ALTERNATING_ROUNDS` runs of `a` and of `b` in turn, each of 64 clients x 100 calls, merged.
async fn alternating(
    bus: &str,
    a: &'static str,
    b: &'static str,
    kernel: &'static str,
) -> (Run, Run) {
    let mut runs: [Option<(Run, f64)>; 2] = [None, None];
    for _ in 0..ALTERNATING_ROUNDS {
        for (slot, method) in [a, b].into_iter().enumerate() {
            let start = Instant::now();
            let r = drive(bus, method, kernel, 100, None).await;
            let secs = start.elapsed().as_secs_f64();
            runs[slot] = Some(match runs[slot].take() {
                None => (r, secs),
                Some((mut acc, t)) => {
                    acc.hist.add(&r.hist).unwrap();
                    acc.errors += r.errors;
                    (acc, t + secs)
                }
            });
        }
    }
    let total = (CLIENTS * 100 * ALTERNATING_ROUNDS) as f64;
    let [Some((mut ra, ta)), Some((mut rb, tb))] = runs else {
        unreachable!("both ran")
    };
    ra.calls_per_s = total / ta;
    rb.calls_per_s = total / tb;
    (ra, rb)
}

/// `CLIENTS` tasks, each on its own connection, each making `CALLS_PER_CLIENT` calls of `method`.
/// Calls per second each client makes in the paced phase (64 x 50 = 3,200 calls/s in all, about a
/// tenth of what the bus sustains here), so that p99 measures the service, not a queue.
const PACED_RATE_PER_CLIENT: u64 = 50;
const PACED_CALLS_PER_CLIENT: usize = 100;

async fn call(conn: &Connection, method: &str, kernel: &str, i: usize) -> bool {
    let r = if method == "Ping" {
        conn.call_method(Some(NAME), PATH, Some(BOUNDS), "Ping", &())
            .await
            .map(drop)
    } else if method == "Report" {
        let k = i % SIZES.len();
        let times = &REPORTED.get().expect("report times prepared")[k];
        conn.call_method(
            Some(NAME),
            PATH,
            Some(MONITOR),
            "Report",
            &(kernel, SIZES[k], times),
        )
        .await
        .map(drop)
    } else {
        let sms = [8u32, 16, 40, 64, 100, 132][i % 6];
        conn.call_method(Some(NAME), PATH, Some(BOUNDS), "GetBound", &(kernel, sms))
            .await
            .map(drop)
    };
    r.is_ok()
}

/// 64 clients each calling at a fixed rate (open loop per client), latency per call.
async fn paced(bus: &str, method: &'static str, kernel: &'static str) -> Run {
    let period = Duration::from_micros(1_000_000 / PACED_RATE_PER_CLIENT);
    drive(bus, method, kernel, PACED_CALLS_PER_CLIENT, Some(period)).await
}

/// 64 clients each with one call always in flight: throughput, and latency at saturation.
async fn load(bus: &str, method: &'static str, kernel: &'static str) -> Run {
    drive(bus, method, kernel, CALLS_PER_CLIENT, None).await
}

/// Run `CLIENTS` clients of `calls` calls each, every `period` (or back to back when `None`).
async fn drive(
    bus: &str,
    method: &'static str,
    kernel: &'static str,
    calls: usize,
    period: Option<Duration>,
) -> Run {
    let mut conns = Vec::new();
    for _ in 0..CLIENTS {
        conns.push(connect(bus).await);
    }
    let start = Instant::now();
    let tasks: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(c, conn)| {
            tokio::spawn(async move {
                let mut tick = match period {
                    Some(p) => {
                        // Stagger the clients across one period so they do not fire in lockstep.
                        tokio::time::sleep(p * c as u32 / CLIENTS as u32).await;
                        let mut t = tokio::time::interval(p);
                        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                        Some(t)
                    }
                    None => None,
                };
                let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
                let mut errors = 0u64;
                for i in 0..calls {
                    if let Some(t) = tick.as_mut() {
                        t.tick().await;
                    }
                    let t = Instant::now();
                    let ok = call(&conn, method, kernel, i).await;
                    hist.saturating_record(t.elapsed().as_micros() as u64);
                    errors += u64::from(!ok);
                }
                (hist, errors)
            })
        })
        .collect();
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    let mut errors = 0;
    for t in tasks {
        let (h, e) = tokio::time::timeout(DEADLINE, t)
            .await
            .expect("load ran past its deadline")
            .unwrap();
        hist.add(h).unwrap();
        errors += e;
    }
    Run {
        calls_per_s: (CLIENTS * calls) as f64 / start.elapsed().as_secs_f64(),
        hist,
        errors,
    }
}

fn report(label: &str, r: &Run) {
    println!(
        "{label:<28} {:>9.0} calls/s  p50 {:>6} us  p99 {:>6} us  max {:>6} us  errors {}",
        r.calls_per_s,
        r.hist.value_at_quantile(0.5),
        r.hist.value_at_quantile(0.99),
        r.hist.max(),
        r.errors
    );
}

fn vm_rss_kib(pid: u32) -> u64 {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).expect("reading /proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS")
}

/// Grow the stored calibration to 1,000 kernels by cloning `bfs` under new names: memory and
/// lookup cost scale with the number of kernels, not with what they measured.
fn fabricate_thousand(state: &Path) -> usize {
    let file = std::fs::read_dir(state)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("calibration-")
        })
        .expect("a calibration file");
    let mut cal: Calibration = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let template = cal.kernels["bfs"].clone();
    let mut i = 0;
    while cal.kernels.len() < 1000 {
        let name = format!("synthetic-{i:04}");
        let mut k = template.clone();
        k.id = format!("{name}@bench");
        // Each its own campaign (a file whose tables hold another kernel's is set aside at
        // start), and imported, with no code of the catalogue's: a kernel the daemon serves
        // without knowing its code, as `ImportSamples` makes one. (As clones of bfs's whole,
        // the file was set aside and the "1,000 kernel" figures measured the 8 built-in ones.)
        k.campaign.kernel = name.clone();
        k.origin = Origin::Imported;
        k.source = "benches/load.rs".into();
        k.code = String::new();
        cal.kernels.insert(name, k);
        i += 1;
    }
    Store::open(state).unwrap().save(&cal).unwrap();
    cal.kernels.len()
}

/// The kernels the daemon serves: the bench stops where fewer than it fabricated are served,
/// as a daemon that set the fabricated file aside would otherwise be measured as a larger one.
async fn served_kernels(conn: &Connection) -> usize {
    let kernels: Vec<String> = conn
        .call_method(Some(NAME), PATH, Some(BOUNDS), "ListKernels", &())
        .await
        .expect("ListKernels")
        .body()
        .deserialize()
        .unwrap();
    kernels.len()
}

/// The times every load `Report` sends: 100 per size, spread over the lower half of the bound.
async fn prepare_reports(conn: &Connection) {
    let mut per_size = Vec::new();
    for sms in SIZES {
        let reply = conn
            .call_method(Some(NAME), PATH, Some(BOUNDS), "GetBound", &("bfs", sms))
            .await
            .expect("GetBound");
        let bound: u64 = reply.body().deserialize().unwrap();
        per_size.push(
            (0..REPORT_TIMES as u64)
                .map(|j| bound / 2 + bound * j / (4 * REPORT_TIMES as u64))
                .collect(),
        );
    }
    REPORTED.set(per_size).expect("prepared once");
}

/// Times reported per series when filling histograms, in calls of `FILL_TIMES / FILL_CALLS`.
const FILL_TIMES: usize = 1000;
const FILL_CALLS: usize = 4;

struct Filled {
    /// When the last report was answered.
    ended: std::time::SystemTime,
    series: usize,
    sizes: usize,
    errors: u64,
    list_ms: f64,
}

/// Give every (kernel, size) of the daemon a histogram of `FILL_TIMES` times: skewed, spread over
/// 50-95% of the bound (hundreds of distinct values at 3 significant digits, as real launches
/// give), from 64 clients. Then one `ListObserved`, which reads them all.
async fn fill_histograms(bus: &str, conn: &Connection) -> Filled {
    let kernels: Vec<String> = conn
        .call_method(Some(NAME), PATH, Some(BOUNDS), "ListKernels", &())
        .await
        .unwrap()
        .body()
        .deserialize()
        .unwrap();
    let mut series: Vec<(String, u32, u64)> = Vec::new();
    let mut sizes = 0;
    for k in &kernels {
        let curve: Vec<(u32, u64)> = conn
            .call_method(Some(NAME), PATH, Some(BOUNDS), "GetCurve", &(k,))
            .await
            .unwrap()
            .body()
            .deserialize()
            .unwrap();
        sizes = curve.len();
        series.extend(curve.into_iter().map(|(m, b)| (k.clone(), m, b)));
    }
    let series = std::sync::Arc::new(series);
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let series = std::sync::Arc::clone(&series);
        let conn = connect(bus).await;
        tasks.push(tokio::spawn(async move {
            let mut errors = 0u64;
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ c as u64;
            for (kernel, sms, bound) in series.iter().skip(c).step_by(CLIENTS) {
                for _ in 0..FILL_CALLS {
                    let times: Vec<u64> = (0..FILL_TIMES / FILL_CALLS)
                        .map(|_| {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
                            bound / 2 + (u * u * u * 0.45 * *bound as f64) as u64
                        })
                        .collect();
                    let r = conn
                        .call_method(
                            Some(NAME),
                            PATH,
                            Some(MONITOR),
                            "Report",
                            &(kernel, *sms, times),
                        )
                        .await;
                    errors += u64::from(r.is_err());
                }
            }
            errors
        }));
    }
    let mut errors = 0;
    for t in tasks {
        errors += tokio::time::timeout(DEADLINE, t)
            .await
            .expect("filling histograms ran past its deadline")
            .unwrap();
    }
    let ended = std::time::SystemTime::now();
    let start = Instant::now();
    let listed = conn
        .call_method(Some(NAME), PATH, Some(MONITOR), "ListObserved", &())
        .await
        .expect("ListObserved");
    let list_ms = start.elapsed().as_secs_f64() * 1e3;
    drop(listed);
    Filled {
        ended,
        series: series.len(),
        sizes,
        errors,
        list_ms,
    }
}

/// Wait (bounded) until the observations file was written after `since`: the daemon saves within
/// its save interval (2 s) of the last change.
fn wait_for_save(state: &Path, since: std::time::SystemTime) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let saved = std::fs::read_dir(state)
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("observations-"))
            .filter_map(|e| e.metadata().ok()?.modified().ok())
            .any(|t| t > since);
        if saved {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("note: observations not saved within 30 s");
}

/// SIGTERM, and wait: the daemon saves observations and writes the metrics file as it stops.
fn stop(d: &mut Daemon) {
    // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
    unsafe { libc::kill(d.0.id() as libc::pid_t, libc::SIGTERM) };
    let _ = d.0.wait();
}

fn files_size(dir: &Path, prefix: &str) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

fn check(ok: bool, what: &str) -> bool {
    println!("  [{}] {what}", if ok { "ok" } else { "MISSED" });
    ok
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let bus = PrivateBus::start(&dir.path().join("bus")).expect("dbus-daemon");
        let address = bus.address().to_string();
        let state = dir.path().join("state");
        let conn = connect(&address).await;

        println!("wcetd load: {CLIENTS} clients x {CALLS_PER_CLIENT} calls per method, private unix-socket bus");
        let mut d = spawn(&address, &state, &[]);
        wait_ready(&conn, &mut d).await;
        let rss_8 = vm_rss_kib(d.0.id());
        let ping = load(&address, "Ping", "").await;
        let bound = load(&address, "GetBound", "bfs").await;
        report("Ping (8 kernels)", &ping);
        report("GetBound (8 kernels)", &bound);
        prepare_reports(&conn).await;
        let (ping_before_report, reported) = alternating(&address, "Ping", "Report", "bfs").await;
        println!("Ping and Report in turn, {ALTERNATING_ROUNDS} rounds of {CLIENTS} clients x 100 calls each:");
        report("Ping (beside Report)", &ping_before_report);
        report(&format!("Report ({REPORT_TIMES} times)"), &reported);
        drop(d);

        let n = fabricate_thousand(&state);
        let metrics = dir.path().join("wcetd.prom");
        let mut d = spawn(&address, &state, &["--metrics-file", metrics.to_str().unwrap()]);
        wait_ready(&conn, &mut d).await;
        let served = served_kernels(&conn).await;
        assert_eq!(served, n, "the daemon serves {served} kernels of the {n} fabricated");
        let rss_1000_idle = vm_rss_kib(d.0.id());
        let ping_1000 = load(&address, "Ping", "").await;
        let bound_1000 = load(&address, "GetBound", "bfs").await;
        let paced_ping = paced(&address, "Ping", "").await;
        let paced_bound = paced(&address, "GetBound", "bfs").await;
        let rss_1000 = vm_rss_kib(d.0.id());
        report(&format!("Ping ({n} kernels)"), &ping_1000);
        report(&format!("GetBound ({n} kernels)"), &bound_1000);
        println!("paced: {CLIENTS} clients x {PACED_RATE_PER_CLIENT} calls/s each, {n} kernels");
        report("Ping (paced)", &paced_ping);
        report("GetBound (paced)", &paced_bound);
        println!("daemon VmRSS: {rss_8} KiB with 8 kernels after start; {rss_1000_idle} KiB with {n} kernels idle, {rss_1000} KiB after load");
        let filled = fill_histograms(&address, &conn).await;
        let rss_filled = vm_rss_kib(d.0.id());
        // Steady state: once the saver has merged every buffered time and written the file.
        wait_for_save(&state, filled.ended);
        let rss_histograms = vm_rss_kib(d.0.id());
        stop(&mut d);
        let saved = files_size(&state, "observations-");
        let prom = std::fs::read_to_string(&metrics).unwrap_or_default();
        println!(
            "histograms: {} series ({n} kernels x {} sizes) of {FILL_TIMES} times each, {} errors; ListObserved of all of them {:.0} ms",
            filled.series, filled.sizes, filled.errors, filled.list_ms
        );
        println!("daemon VmRSS with them: {rss_filled} KiB right after the reports, {rss_histograms} KiB once saved ({:+} KiB over {n} kernels after load); observations file {saved} bytes; metrics file {} bytes, {} lines", rss_histograms as i64 - rss_1000 as i64, prom.len(), prom.lines().count());

        let ratio = ping.calls_per_s / bound.calls_per_s;
        let ratio_1000 = ping_1000.calls_per_s / bound_1000.calls_per_s;
        println!("Ping/GetBound throughput ratio: {ratio:.2} (8 kernels), {ratio_1000:.2} ({n} kernels)");
        println!("targets:");
        let mut all = true;
        let errors = ping.errors + bound.errors + ping_1000.errors + bound_1000.errors + paced_ping.errors + paced_bound.errors
            + ping_before_report.errors + reported.errors + filled.errors;
        all &= check(errors == 0, "zero errors");
        let (p50_ping, p50_report) = (ping_before_report.hist.value_at_quantile(0.5), reported.hist.value_at_quantile(0.5));
        let report_ratio = p50_report as f64 / p50_ping as f64;
        all &= check(report_ratio <= 1.5, &format!("Report of {REPORT_TIMES} times p50 within 1.5x of Ping ({p50_report} us vs {p50_ping} us: {report_ratio:.2}x)"));
        all &= check(ratio <= 1.2, &format!("GetBound within 1.2x of Ping, 8 kernels ({ratio:.2}x)"));
        all &= check(ratio_1000 <= 1.2, &format!("GetBound within 1.2x of Ping, {n} kernels ({ratio_1000:.2}x)"));
        let saturated = bound.hist.value_at_quantile(0.99).max(bound_1000.hist.value_at_quantile(0.99));
        let p99 = paced_bound.hist.value_at_quantile(0.99);
        all &= check(p99 < 2000, &format!("GetBound p99 < 2 ms at 3,200 calls/s ({p99} us)"));
        println!("  [info] GetBound p99 at saturation (64 calls always in flight): {saturated} us");
        all &= check(rss_1000 < 20 * 1024, &format!("RSS < 20 MB with {n} kernels ({:.1} MiB)", rss_1000 as f64 / 1024.0));
        all &= check(rss_histograms < 64 * 1024, &format!("RSS < 64 MiB with {} histograms ({:.1} MiB)", filled.series, rss_histograms as f64 / 1024.0));
        println!("{}", if all { "all targets met" } else { "some targets missed" });
    });
}
