//! The bus face under hostile input: every `Bounds1`, `Calibration1` and `Monitor1` method is called with
//! random argument lists (wrong types, wrong arity, empty and huge strings, extreme integers) on
//! the real daemon. Every call must come back, as a reply or a D-Bus error, within a deadline,
//! and the daemon must still answer afterwards.

mod ops_support;

use ops_support::*;
use rand::{Rng, SeedableRng};
use std::time::Duration;
use zbus::{Structure, Variant};

const METHODS: &[(&str, &str)] = &[
    (BOUNDS, "ListKernels"),
    (BOUNDS, "GetBound"),
    (BOUNDS, "GetBoundInfo"),
    (BOUNDS, "GetCurve"),
    (BOUNDS, "MinPartition"),
    (BOUNDS, "GetBoundTagged"),
    (BOUNDS, "Ping"),
    (CALIBRATION, "Recalibrate"),
    (CALIBRATION, "GetJob"),
    (CALIBRATION, "CancelJob"),
    ("org.wcetd.Monitor1", "Report"),
    ("org.wcetd.Monitor1", "ReportTagged"),
    ("org.wcetd.Monitor1", "GetObserved"),
    ("org.wcetd.Monitor1", "GetObservedTagged"),
    ("org.wcetd.Monitor1", "ListObserved"),
];

fn random_string(rng: &mut impl Rng) -> String {
    match rng.random_range(0..7) {
        0 => String::new(),
        1 => "bfs".into(),
        2 => "x".repeat(rng.random_range(10_000..200_000)),
        3 => "ñé✓\u{1F680}\u{202E}".into(),
        4 => "bfs\n; rm -rf /".into(),
        5 => "isolated".into(),
        _ => (0..rng.random_range(1..40))
            .map(|_| char::from(rng.random_range(1u8..128)))
            .collect(),
    }
}

fn random_value(rng: &mut impl Rng) -> Variant<'static> {
    match rng.random_range(0..11) {
        0 => Variant::from(
            *[0u32, 1, 7, 8, 16, u32::MAX]
                .get(rng.random_range(0..6))
                .unwrap(),
        ),
        1 => Variant::from(rng.random::<u32>()),
        2 => Variant::from(rng.random::<i32>()),
        3 => Variant::from(
            *[0u64, 1, u64::MAX, rng.random()]
                .get(rng.random_range(0..4))
                .unwrap(),
        ),
        4 => Variant::from(random_string(rng)),
        5 => Variant::from(rng.random::<bool>()),
        6 => Variant::from(f64::from_bits(rng.random())),
        7 => Variant::from(
            (0..rng.random_range(0..5))
                .map(|_| random_string(rng))
                .collect::<Vec<_>>(),
        ),
        8 => Variant::from(vec![0u8; rng.random_range(0..1000)]),
        9 => Variant::from(i64::MIN),
        _ => Variant::new(Variant::from(random_string(rng))),
    }
}

/// Arguments of the right types with hostile values, so calls get past signature checking and
/// reach the service's own validation.
fn typed_arguments<R: Rng>(method: &str, rng: &mut R) -> Vec<Variant<'static>> {
    let s = |rng: &mut R| Variant::from(random_string(rng));
    let u = |rng: &mut R| {
        Variant::from([0u32, 1, 8, 9, 16, 132, 133, u32::MAX][rng.random_range(0..8)])
    };
    let t = |rng: &mut R| Variant::from([0u64, 1, 2, 1000, u64::MAX][rng.random_range(0..5)]);
    match method {
        "GetBound" | "GetBoundInfo" => vec![s(rng), u(rng)],
        "GetCurve" => vec![s(rng)],
        "MinPartition" => vec![s(rng), t(rng)],
        "GetBoundTagged" => vec![s(rng), u(rng), s(rng)],
        "Recalibrate" => vec![Variant::from(
            (0..rng.random_range(0..3))
                .map(|_| random_string(rng))
                .collect::<Vec<_>>(),
        )],
        "GetJob" | "CancelJob" => vec![t(rng)],
        "GetObserved" => vec![s(rng), u(rng)],
        "GetObservedTagged" => vec![s(rng), u(rng), s(rng)],
        "Report" | "ReportTagged" => {
            let n = [0, 1, 3, 65_536, 65_537][rng.random_range(0..5)];
            let times: Vec<u64> = (0..n)
                .map(|_| [0u64, 1, 2, 1000, u64::MAX][rng.random_range(0..5)])
                .collect();
            let mut args = vec![s(rng), u(rng)];
            if method == "ReportTagged" {
                args.push(s(rng));
            }
            args.push(Variant::from(times));
            args
        }
        _ => vec![],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_arguments_get_a_reply_or_an_error_and_never_a_hang() {
    tokio::time::timeout(Duration::from_secs(90), async {
        let fx = Fixture::new();
        let conn = fx.connect().await;
        let mut d = Daemon::spawn(fx.address(), &fx.state(), &[]);
        wait_for_daemon(&conn, &mut d).await;
        wait_for_job(&conn, 1).await;

        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0xb05);
        let (mut ok, mut errors) = (0, std::collections::BTreeMap::<String, u32>::new());
        for round in 0..60 {
            for &(iface, method) in METHODS {
                let fields: Vec<Variant<'static>> = if rng.random() {
                    typed_arguments(method, &mut rng)
                } else {
                    let n = rng.random_range(0..4);
                    (0..n).map(|_| random_value(&mut rng)).collect()
                };
                let what = format!("round {round}: {method}{fields:?}");
                let call = async {
                    if fields.is_empty() {
                        conn.call_method(Some(NAME), PATH, Some(iface), method, &())
                            .await
                    } else {
                        let body = fields
                            .iter()
                            .cloned()
                            .fold(Structure::builder(), |b, f| b.append_field(f));
                        let body = body.build().expect("a non-empty structure");
                        conn.call_method(Some(NAME), PATH, Some(iface), method, &body)
                            .await
                    }
                };
                let reply = tokio::time::timeout(Duration::from_secs(10), call)
                    .await
                    .unwrap_or_else(|_| panic!("{:.200}: no reply within 10 s", what));
                match error_name(&reply).as_str() {
                    "ok" => ok += 1,
                    name if name.starts_with("not a D-Bus error") => panic!("{what:.200}: {name}"),
                    name => *errors.entry(name.to_string()).or_default() += 1,
                }
            }
        }
        println!("bus fuzz: {ok} successes, errors by name: {errors:?}");
        assert!(
            errors.contains_key("org.freedesktop.DBus.Error.InvalidArgs"),
            "wrong types were not all accepted"
        );

        let kernels: Vec<String> = call(&conn, BOUNDS, "ListKernels", &())
            .await
            .expect("ListKernels after fuzzing");
        assert!(kernels.iter().any(|k| k == "bfs"));
        assert!(d.child.try_wait().unwrap().is_none(), "the daemon died");
        d.stop();
    })
    .await
    .expect("test ran past its time limit");
}
