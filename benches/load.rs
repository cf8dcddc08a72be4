//! Load generator: the real `wcetd` binary on a private bus, 64 concurrent clients (one zbus
//! connection each) calling `GetBound` and, in the same run, the no-op `Ping`, so the cost of a
//! bound can be read against the cost of the bus itself. Then the daemon's resident memory with
//! 1,000 stored kernels. Prints the numbers and whether each target holds; bounded in calls and
//! time, unix sockets only. Run: `cargo bench --bench load`.

use hdrhistogram::Histogram;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use wcetd::bus::PrivateBus;
use wcetd::store::{Calibration, Store};
use zbus::Connection;

const NAME: &str = "org.wcetd.Wcetd1";
const PATH: &str = "/org/wcetd/Wcetd1";
const BOUNDS: &str = "org.wcetd.Bounds1";
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

fn spawn(bus: &str, state: &Path) -> Daemon {
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
        let mut k = template.clone();
        k.id = format!("synthetic-{i:04}@bench");
        cal.kernels.insert(format!("synthetic-{i:04}"), k);
        i += 1;
    }
    Store::open(state).unwrap().save(&cal).unwrap();
    cal.kernels.len()
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
        let mut d = spawn(&address, &state);
        wait_ready(&conn, &mut d).await;
        let rss_8 = vm_rss_kib(d.0.id());
        let ping = load(&address, "Ping", "").await;
        let bound = load(&address, "GetBound", "bfs").await;
        report("Ping (8 kernels)", &ping);
        report("GetBound (8 kernels)", &bound);
        drop(d);

        let n = fabricate_thousand(&state);
        let mut d = spawn(&address, &state);
        wait_ready(&conn, &mut d).await;
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

        let ratio = ping.calls_per_s / bound.calls_per_s;
        let ratio_1000 = ping_1000.calls_per_s / bound_1000.calls_per_s;
        println!("Ping/GetBound throughput ratio: {ratio:.2} (8 kernels), {ratio_1000:.2} ({n} kernels)");
        println!("targets:");
        let mut all = true;
        let errors = ping.errors + bound.errors + ping_1000.errors + bound_1000.errors + paced_ping.errors + paced_bound.errors;
        all &= check(errors == 0, "zero errors");
        all &= check(ratio <= 1.2, &format!("GetBound within 1.2x of Ping, 8 kernels ({ratio:.2}x)"));
        all &= check(ratio_1000 <= 1.2, &format!("GetBound within 1.2x of Ping, {n} kernels ({ratio_1000:.2}x)"));
        let saturated = bound.hist.value_at_quantile(0.99).max(bound_1000.hist.value_at_quantile(0.99));
        let p99 = paced_bound.hist.value_at_quantile(0.99);
        all &= check(p99 < 2000, &format!("GetBound p99 < 2 ms at 3,200 calls/s ({p99} us)"));
        println!("  [info] GetBound p99 at saturation (64 calls always in flight): {saturated} us");
        all &= check(rss_1000 < 20 * 1024, &format!("RSS < 20 MB with {n} kernels ({:.1} MiB)", rss_1000 as f64 / 1024.0));
        println!("{}", if all { "all targets met" } else { "some targets missed" });
    });
}
