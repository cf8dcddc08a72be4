//! The fleet examples parse and say what docs/fleet.md says: the Kubernetes DaemonSet and the
//! Prometheus alerting rules (checked with `promtool check rules` and unit-tested with `promtool
//! test rules` where it is installed).

use std::process::Command;

fn read(name: &str) -> String {
    std::fs::read_to_string(format!("{}/docs/fleet/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

#[test]
fn the_daemonset_mounts_state_the_system_bus_and_every_gpu() {
    let doc: serde_yaml::Value = serde_yaml::from_str(&read("daemonset.yaml")).unwrap();
    assert_eq!(doc["kind"], "DaemonSet");
    let spec = &doc["spec"]["template"]["spec"];
    assert_eq!(spec["runtimeClassName"], "nvidia");
    let c = &spec["containers"][0];
    let args: Vec<&str> = c["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        args.contains(&"--system") && args.contains(&"--devices=all"),
        "{args:?}"
    );
    let env = c["env"].as_sequence().unwrap();
    assert!(env
        .iter()
        .any(|e| e["name"] == "NVIDIA_VISIBLE_DEVICES" && e["value"] == "all"));
    let host = |name: &str| {
        spec["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .and_then(|v| v["hostPath"]["path"].as_str())
            .map(str::to_string)
    };
    assert_eq!(host("state").as_deref(), Some("/var/lib/wcetd"));
    assert_eq!(
        host("system-bus").as_deref(),
        Some("/run/dbus/system_bus_socket")
    );
    let mounts = c["volumeMounts"].as_sequence().unwrap();
    for name in ["state", "system-bus", "kernels", "textfile"] {
        assert!(
            mounts.iter().any(|m| m["name"] == name),
            "no mount of {name}"
        );
    }
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
}

#[test]
fn the_alert_rules_parse_and_name_the_daemons_series() {
    let text = read("alerts.yml");
    let doc: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let rules = doc["groups"][0]["rules"].as_sequence().unwrap();
    let exprs: Vec<&str> = rules.iter().map(|r| r["expr"].as_str().unwrap()).collect();
    for series in [
        "wcetd_overruns_total",
        "wcetd_calibration_stale",
        "wcetd_health",
        "wcetd_metrics_timestamp_seconds",
    ] {
        assert!(
            exprs.iter().any(|e| e.contains(series)),
            "no rule on {series}"
        );
    }
    if Command::new("promtool").arg("--version").output().is_err() {
        println!("note: promtool not installed; parsed the rules only");
        return;
    }
    promtool(&["check", "rules"], "alerts.yml");
    // The unit tests render the summaries: a label the rule's aggregation drops reads as nothing.
    promtool(&["test", "rules"], "alerts.test.yml");
}

/// Run `promtool ARGS docs/fleet/NAME`, failing the test with its output when it fails.
fn promtool(args: &[&str], name: &str) {
    let path = format!("{}/docs/fleet/{name}", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("promtool")
        .args(args)
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool {} {name}: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
