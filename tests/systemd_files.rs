//! Checks of the files in `systemd/`: the bus policy is well-formed XML and says what the design
//! notes say (Bounds1 for everyone, Calibration1 for root and group `wcetd` only, the name for user
//! `wcetd` only), and the unit passes `systemd-analyze verify` where that tool exists.

use std::path::{Path, PathBuf};
use std::process::Command;

fn systemd_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd")
}

fn read(name: &str) -> String {
    std::fs::read_to_string(systemd_dir().join(name))
        .unwrap_or_else(|e| panic!("reading systemd/{name}: {e}"))
}

/// One element of the policy file: its name and attributes, and the `<policy>` it sits in.
#[derive(Debug, Clone)]
struct Element {
    name: String,
    attrs: Vec<(String, String)>,
}

impl Element {
    fn attr(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A deliberately small XML reader, enough for busconfig files: it checks that tags balance and
/// attributes are quoted, and returns (element, enclosing policy) for every start tag. Pulling in
/// an XML crate for one test file is not worth the dependency.
fn parse(xml: &str) -> Result<Vec<(Element, Option<Element>)>, String> {
    let mut out = Vec::new();
    let mut stack: Vec<Element> = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find('<') {
        let text = &rest[..start];
        if !stack.is_empty() && text.contains('&') && !text.contains(';') {
            return Err(format!("unescaped & in text: {text:?}"));
        }
        rest = &rest[start..];
        if let Some(r) = rest.strip_prefix("<!--") {
            let end = r.find("-->").ok_or("unterminated comment")?;
            rest = &r[end + 3..];
            continue;
        }
        if rest.starts_with("<?") || rest.starts_with("<!") {
            let end = rest.find('>').ok_or("unterminated declaration")?;
            rest = &rest[end + 1..];
            continue;
        }
        let end = rest.find('>').ok_or("unterminated tag")?;
        let tag = &rest[1..end];
        rest = &rest[end + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            let open = stack
                .pop()
                .ok_or_else(|| format!("</{name}> closes nothing"))?;
            if open.name != name.trim() {
                return Err(format!("</{}> closes <{}>", name.trim(), open.name));
            }
            continue;
        }
        let self_closing = tag.ends_with('/');
        let tag = tag.trim_end_matches('/');
        let mut parts = tag.splitn(2, char::is_whitespace);
        let name = parts.next().unwrap_or_default().to_string();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(format!("bad element name in <{tag}>"));
        }
        let mut attrs = Vec::new();
        let mut a = parts.next().unwrap_or_default().trim();
        while !a.is_empty() {
            let eq = a
                .find('=')
                .ok_or_else(|| format!("attribute without value in <{tag}>"))?;
            let key = a[..eq].trim().to_string();
            let v = a[eq + 1..].trim_start();
            let q = v
                .chars()
                .next()
                .filter(|c| *c == '"' || *c == '\'')
                .ok_or_else(|| format!("unquoted attribute in <{tag}>"))?;
            let close = v[1..]
                .find(q)
                .ok_or_else(|| format!("unterminated attribute in <{tag}>"))?;
            attrs.push((key, v[1..1 + close].to_string()));
            a = v[close + 2..].trim_start();
        }
        let element = Element { name, attrs };
        let policy = stack.iter().rev().find(|e| e.name == "policy").cloned();
        out.push((element.clone(), policy));
        if !self_closing {
            stack.push(element);
        }
    }
    match stack.pop() {
        Some(open) => Err(format!("<{}> is never closed", open.name)),
        None => Ok(out),
    }
}

/// Who is asking, as dbus-daemon sees it.
struct Caller<'a> {
    user: &'a str,
    groups: &'a [&'a str],
}

/// dbus-daemon's evaluation order: the default context, then group policies, then user policies;
/// within that order the last matching rule wins.
fn decide(
    rules: &[(Element, Option<Element>)],
    caller: &Caller,
    matches: impl Fn(&Element) -> bool,
) -> bool {
    let applies = |p: &Element, rank: u8| match rank {
        0 => p.attr("context") == Some("default"),
        1 => p.attr("group").is_some_and(|g| caller.groups.contains(&g)),
        _ => p.attr("user").is_some_and(|u| u == caller.user),
    };
    let mut allowed = false;
    for rank in 0..3 {
        for (rule, policy) in rules {
            let Some(policy) = policy else { continue };
            if applies(policy, rank)
                && (rule.name == "allow" || rule.name == "deny")
                && matches(rule)
            {
                allowed = rule.name == "allow";
            }
        }
    }
    allowed
}

fn may_call(rules: &[(Element, Option<Element>)], caller: &Caller, interface: &str) -> bool {
    decide(rules, caller, |r| {
        r.attr("send_destination") == Some("org.wcetd.Wcetd1")
            && r.attr("send_interface").is_none_or(|i| i == interface)
            && r.attrs
                .iter()
                .all(|(k, _)| k == "send_destination" || k == "send_interface")
    })
}

fn may_own(rules: &[(Element, Option<Element>)], caller: &Caller) -> bool {
    decide(rules, caller, |r| r.attr("own") == Some("org.wcetd.Wcetd1"))
}

#[test]
fn bus_policy_is_well_formed_and_guards_calibration() {
    let xml = read("org.wcetd.Wcetd1.conf");
    let rules =
        parse(&xml).unwrap_or_else(|e| panic!("org.wcetd.Wcetd1.conf is not well-formed: {e}"));
    assert_eq!(
        rules.first().map(|(e, _)| e.name.as_str()),
        Some("busconfig")
    );

    let anyone = Caller {
        user: "alice",
        groups: &["users"],
    };
    let operator = Caller {
        user: "bob",
        groups: &["users", "wcetd"],
    };
    let root = Caller {
        user: "root",
        groups: &["root"],
    };
    let daemon = Caller {
        user: "wcetd",
        groups: &["wcetd"],
    };

    for iface in [
        "org.wcetd.Bounds1",
        "org.wcetd.Admission1",
        "org.freedesktop.DBus.Introspectable",
        "org.freedesktop.DBus.Properties",
        "org.freedesktop.DBus.Peer",
    ] {
        assert!(
            may_call(&rules, &anyone, iface),
            "anyone should be allowed {iface}"
        );
    }
    assert!(
        !may_call(&rules, &anyone, "org.wcetd.Calibration1"),
        "Calibration1 must be denied by default"
    );
    assert!(
        !may_call(&rules, &anyone, "org.example.Unknown"),
        "unknown interfaces must be denied by default"
    );
    assert!(
        may_call(&rules, &operator, "org.wcetd.Calibration1"),
        "group wcetd must be allowed Calibration1"
    );
    assert!(
        may_call(&rules, &root, "org.wcetd.Calibration1"),
        "root must be allowed Calibration1"
    );

    assert!(
        may_own(&rules, &daemon),
        "user wcetd must be able to own the name"
    );
    assert!(!may_own(&rules, &anyone), "nobody else may own the name");
    assert!(
        !may_own(&rules, &operator),
        "group wcetd must not be able to own the name"
    );

    match Command::new("xmllint")
        .args(["--noout"])
        .arg(systemd_dir().join("org.wcetd.Wcetd1.conf"))
        .output()
    {
        Ok(out) => assert!(
            out.status.success(),
            "xmllint: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(_) => {
            println!("note: xmllint not installed; relied on the built-in well-formedness check")
        }
    }
}

#[test]
fn the_small_parser_rejects_broken_xml() {
    for bad in ["<a><b></a>", "<a>", "<a x=1/>", "</a>", "<a x=\"1/>"] {
        assert!(parse(bad).is_err(), "{bad} should be rejected");
    }
}

#[test]
fn activation_file_hands_over_to_systemd() {
    let text = read("org.wcetd.Wcetd1.service");
    for line in [
        "[D-BUS Service]",
        "Name=org.wcetd.Wcetd1",
        "SystemdService=wcetd.service",
        "User=wcetd",
    ] {
        assert!(
            text.lines().any(|l| l.trim() == line),
            "activation file lacks `{line}`"
        );
    }
}

#[test]
fn unit_keeps_its_contract() {
    let unit = read("wcetd.service");
    for line in [
        "Type=dbus",
        "BusName=org.wcetd.Wcetd1",
        "ExecStart=/usr/bin/wcetd --system",
        "User=wcetd",
        "StateDirectory=wcetd",
        "DevicePolicy=closed",
        "DeviceAllow=char-nvidia rw",
        "DeviceAllow=char-nvidia-uvm rw",
        "DeviceAllow=char-nvidia-frontend rw",
        "CapabilityBoundingSet=",
    ] {
        assert!(
            unit.lines().any(|l| l.trim() == line),
            "wcetd.service lacks `{line}`"
        );
    }
    assert!(
        !unit
            .lines()
            .any(|l| l.starts_with("MemoryDenyWriteExecute=")),
        "MDWE breaks NVRTC/driver JIT"
    );
    assert!(
        !unit.lines().any(|l| l.starts_with("WatchdogSec=")),
        "the daemon sends no watchdog pings"
    );
}

/// `systemd-analyze verify` checks that ExecStart exists, so the unit is verified with ExecStart
/// pointed at a stand-in in a temporary directory; nothing outside it is touched.
#[test]
fn unit_passes_systemd_analyze_verify() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        println!("note: systemd-analyze not installed; skipping unit verification");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let stand_in = dir.path().join("wcetd");
    std::fs::write(&stand_in, "#!/bin/sh\nexit 0\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).unwrap();
    let unit = read("wcetd.service").replace(
        "ExecStart=/usr/bin/wcetd",
        &format!("ExecStart={}", stand_in.display()),
    );
    let path = dir.path().join("wcetd.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !stderr.contains("wcetd.service:"),
        "systemd-analyze verify: {stderr}"
    );
}

#[test]
fn sysusers_and_tmpfiles_create_the_user_and_state_dir() {
    let users = read("wcetd.sysusers");
    assert!(
        users.lines().any(|l| l.starts_with("u wcetd ")),
        "sysusers must create user wcetd"
    );
    let tmp = read("wcetd.tmpfiles");
    assert!(tmp
        .lines()
        .any(|l| l.starts_with("d /var/lib/wcetd ") && l.contains("wcetd wcetd")));
    assert!(
        tmp.lines()
            .any(|l| l.starts_with("d /etc/wcetd/kernels.d ")),
        "tmpfiles must create the kernel directory the unit passes"
    );
}

/// `install.sh` into a staging root: binaries, the unit, man pages and completions generated from
/// the clap definitions, and the configuration file (never overwriting one already there).
#[test]
fn install_sh_stages_man_pages_completions_and_the_configuration() {
    let bindir = std::path::Path::new(env!("CARGO_BIN_EXE_wcetd"))
        .parent()
        .unwrap()
        .to_path_buf();
    let stage = tempfile::tempdir().unwrap();
    let run = || {
        let out = Command::new("sh")
            .arg(systemd_dir().join("install.sh"))
            .env("DESTDIR", stage.path())
            .env("BINDIR", &bindir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "install.sh: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run();
    let root = stage.path();
    for file in [
        "usr/bin/wcetd",
        "usr/bin/wcetctl",
        "usr/lib/systemd/system/wcetd.service",
        "usr/share/man/man8/wcetd.8",
        "usr/share/man/man1/wcetctl.1",
        "usr/share/man/man1/wcetctl-admit.1",
        "usr/share/bash-completion/completions/wcetctl",
        "usr/share/zsh/site-functions/_wcetd",
        "usr/share/fish/vendor_completions.d/wcetctl.fish",
        "etc/wcetd/wcetd.toml",
    ] {
        let path = root.join(file);
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        assert!(len > 0, "install.sh did not stage {file}");
    }
    let page = std::fs::read_to_string(root.join("usr/share/man/man8/wcetd.8")).unwrap();
    assert!(
        page.contains(".TH wcetd 8") && page.contains("exceedance"),
        "{page:.400}"
    );
    assert!(
        std::fs::read_to_string(root.join("usr/share/bash-completion/completions/wcetctl"))
            .unwrap()
            .contains("recalibrate")
    );
    // The example configuration parses, and an operator's own is kept on reinstall.
    let example = std::fs::read_to_string(root.join("etc/wcetd/wcetd.toml")).unwrap();
    assert!(example.parse::<toml::Table>().is_ok());
    std::fs::write(root.join("etc/wcetd/wcetd.toml"), "launches = 500\n").unwrap();
    run();
    assert_eq!(
        std::fs::read_to_string(root.join("etc/wcetd/wcetd.toml")).unwrap(),
        "launches = 500\n"
    );
    assert!(root
        .join("usr/share/dbus-1/system.d/org.wcetd.Wcetd1.conf")
        .is_file());
}

/// Under another prefix the bus policy goes where the system bus reads it (it does not read
/// `/usr/local/share/dbus-1/system.d`, and the daemon was refused its name), and the unit points
/// at the prefix; a `SYSCONFDIR` the daemon would never read is refused before anything is staged.
#[test]
fn install_sh_under_another_prefix_stages_what_the_system_reads() {
    let bindir = std::path::Path::new(env!("CARGO_BIN_EXE_wcetd"))
        .parent()
        .unwrap()
        .to_path_buf();
    let stage = tempfile::tempdir().unwrap();
    let install = |vars: &[(&str, &str)]| {
        Command::new("sh")
            .arg(systemd_dir().join("install.sh"))
            .env("DESTDIR", stage.path())
            .env("BINDIR", &bindir)
            .envs(vars.iter().copied())
            .output()
            .unwrap()
    };
    let refused = install(&[("SYSCONFDIR", "/usr/local/etc")]);
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && why.contains("/etc/wcetd/wcetd.toml"),
        "{why}"
    );
    assert_eq!(std::fs::read_dir(stage.path()).unwrap().count(), 0);

    let out = install(&[("PREFIX", "/usr/local")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let root = stage.path();
    assert!(root
        .join("etc/dbus-1/system.d/org.wcetd.Wcetd1.conf")
        .is_file());
    assert!(!root.join("usr/local/share/dbus-1/system.d").exists());
    let unit =
        std::fs::read_to_string(root.join("usr/local/lib/systemd/system/wcetd.service")).unwrap();
    assert!(
        unit.contains("ExecStart=/usr/local/bin/wcetd --system")
            && unit.contains("file:/usr/local/share/doc/wcetd/operations.md")
            && !unit.contains("/usr/bin/"),
        "{unit}"
    );
}

/// Whether `caller` may call `member` of `interface`: like [`may_call`], with rules that name a
/// member too.
fn may_call_member(
    rules: &[(Element, Option<Element>)],
    caller: &Caller,
    interface: &str,
    member: &str,
) -> bool {
    decide(rules, caller, |r| {
        r.attr("send_destination") == Some("org.wcetd.Wcetd1")
            && r.attr("send_interface").is_none_or(|i| i == interface)
            && r.attr("send_member").is_none_or(|m| m == member)
            && r.attrs.iter().all(|(k, _)| {
                ["send_destination", "send_interface", "send_member"].contains(&k.as_str())
            })
    })
}

#[test]
fn bus_policy_lets_reporters_report_and_everyone_read_observations() {
    let rules = parse(&read("org.wcetd.Wcetd1.conf")).expect("well-formed");
    let caller = |user, groups| Caller { user, groups };
    let anyone = caller("alice", &["users"]);
    let reporter = caller("sched", &["users", "wcetd-report"]);
    let operator = caller("bob", &["wcetd"]);
    let root = caller("root", &["root"]);
    let daemon = caller("wcetd", &["wcetd"]);
    let monitor = "org.wcetd.Monitor1";
    for member in ["GetObserved", "GetObservedTagged", "ListObserved"] {
        assert!(
            may_call_member(&rules, &anyone, monitor, member),
            "anyone may call {member}"
        );
    }
    for member in ["Report", "ReportTagged"] {
        assert!(
            !may_call_member(&rules, &anyone, monitor, member),
            "{member} must be denied by default"
        );
        for who in [&reporter, &operator, &root, &daemon] {
            assert!(
                may_call_member(&rules, who, monitor, member),
                "{} may call {member}",
                who.user
            );
        }
    }
    assert!(
        !may_call_member(&rules, &reporter, "org.wcetd.Calibration1", "Recalibrate"),
        "reporters are not operators"
    );
    let users = read("wcetd.sysusers");
    assert!(
        users.lines().any(|l| l.starts_with("g wcetd-report ")),
        "sysusers must create group wcetd-report"
    );
}
