//! A small checker of the Prometheus text exposition format (0.0.4), for the metrics file: what
//! `promtool check metrics` rejects as a parse error, and the lint rules it reports for what wcetd
//! writes (HELP for every family, `_total` on counters only, snake_case names). A crate for one
//! test file is not worth the dependency; where `promtool` is on the PATH, [`promtool`] runs it
//! too.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

/// One sample: its metric name, labels and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// What a well-formed file holds: every family's type, and every sample.
#[derive(Debug, Default)]
pub struct Exposition {
    pub types: BTreeMap<String, String>,
    pub samples: Vec<Sample>,
}

impl Exposition {
    /// The value of the sample of `name` whose labels include every pair of `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples
            .iter()
            .find(|s| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
    }
}

fn valid_metric_name(n: &str) -> bool {
    let mut c = n.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_' || f == ':')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_' || x == ':')
}

fn valid_label_name(n: &str) -> bool {
    let mut c = n.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && n.chars().all(|x| x.is_ascii_alphanumeric() || x == '_')
        && !n.starts_with("__")
}

/// promlint's camelCase rule: a lower-case letter followed by an upper-case one.
fn camel_case(n: &str) -> bool {
    n.as_bytes()
        .windows(2)
        .any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase())
}

/// Parse `{a="b",...}` at the start of `s`; returns the labels and the rest.
fn labels(s: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut out = BTreeMap::new();
    let mut rest = s.strip_prefix('{').ok_or("expected {")?;
    loop {
        rest = rest.trim_start();
        if let Some(r) = rest.strip_prefix('}') {
            return Ok((out, r));
        }
        let eq = rest.find('=').ok_or("label without =")?;
        let name = rest[..eq].trim();
        if !valid_label_name(name) {
            return Err(format!("bad label name `{name}`"));
        }
        let mut chars = rest[eq + 1..].char_indices();
        if chars.next().map(|(_, c)| c) != Some('"') {
            return Err(format!("label {name}: value not quoted"));
        }
        let mut value = String::new();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next().map(|(_, c)| c) {
                    Some('\\') => value.push('\\'),
                    Some('"') => value.push('"'),
                    Some('n') => value.push('\n'),
                    other => return Err(format!("label {name}: bad escape {other:?}")),
                },
                '"' => {
                    end = Some(eq + 1 + i + 1);
                    break;
                }
                '\n' => return Err(format!("label {name}: raw newline")),
                c => value.push(c),
            }
        }
        let end = end.ok_or_else(|| format!("label {name}: unterminated value"))?;
        if out.insert(name.to_string(), value).is_some() {
            return Err(format!("label {name} given twice"));
        }
        rest = rest[end..].trim_start();
        if let Some(r) = rest.strip_prefix(',') {
            rest = r;
        } else if !rest.starts_with('}') {
            return Err("expected , or } after a label".into());
        }
    }
}

fn value(s: &str) -> Result<f64, String> {
    match s {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => s.parse().map_err(|_| format!("bad value `{s}`")),
    }
}

/// The family a sample belongs to (a histogram's `_bucket` etc. would need more; wcetd writes
/// counters and gauges only).
fn family_of<'a>(name: &'a str, types: &BTreeMap<String, String>) -> &'a str {
    if types.contains_key(name) {
        return name;
    }
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix) {
            if types.contains_key(base) {
                return base;
            }
        }
    }
    name
}

/// Check `text`; the first problem found, with its line number.
pub fn check(text: &str) -> Result<Exposition, String> {
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("the last line does not end with a newline".into());
    }
    let mut exp = Exposition::default();
    let mut helps = BTreeSet::new();
    let mut done_families = BTreeSet::new();
    let mut current: Option<String> = None;
    let mut series = BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        let at = |e: String| format!("line {}: {e}: {line}", i + 1);
        if line.trim().is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let mut parts = comment.trim_start().splitn(3, ' ');
            match parts.next() {
                Some("HELP") => {
                    let name = parts
                        .next()
                        .ok_or_else(|| at("HELP without a name".into()))?;
                    if !valid_metric_name(name) || !helps.insert(name.to_string()) {
                        return Err(at("bad or repeated HELP".into()));
                    }
                    if parts.next().is_none_or(|h| h.trim().is_empty()) {
                        return Err(at("empty HELP".into()));
                    }
                }
                Some("TYPE") => {
                    let name = parts
                        .next()
                        .ok_or_else(|| at("TYPE without a name".into()))?;
                    let kind = parts.next().unwrap_or("").trim();
                    if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                        return Err(at(format!("unknown type `{kind}`")));
                    }
                    if exp
                        .types
                        .insert(name.to_string(), kind.to_string())
                        .is_some()
                    {
                        return Err(at("TYPE given twice".into()));
                    }
                    if exp
                        .samples
                        .iter()
                        .any(|s| family_of(&s.name, &exp.types) == name)
                    {
                        return Err(at("TYPE after the family's samples".into()));
                    }
                }
                _ => {}
            }
            continue;
        }
        let name_end = line
            .find(['{', ' '])
            .ok_or_else(|| at("a sample without a value".into()))?;
        let name = &line[..name_end];
        if !valid_metric_name(name) {
            return Err(at(format!("bad metric name `{name}`")));
        }
        let (labels, rest) = if line[name_end..].starts_with('{') {
            labels(&line[name_end..]).map_err(at)?
        } else {
            (BTreeMap::new(), &line[name_end..])
        };
        let mut fields = rest.split_whitespace();
        let v = value(fields.next().ok_or_else(|| at("no value".into()))?).map_err(at)?;
        if let Some(ts) = fields.next() {
            ts.parse::<i64>()
                .map_err(|_| at(format!("bad timestamp `{ts}`")))?;
        }
        if fields.next().is_some() {
            return Err(at("text after the timestamp".into()));
        }
        let family = family_of(name, &exp.types).to_string();
        if current.as_deref() != Some(family.as_str()) {
            if done_families.contains(&family) {
                return Err(at(format!("samples of `{family}` are not together")));
            }
            if let Some(prev) = current.replace(family.clone()) {
                done_families.insert(prev);
            }
        }
        let key = format!("{name}{labels:?}");
        if !series.insert(key) {
            return Err(at("the same series twice".into()));
        }
        exp.samples.push(Sample {
            name: name.to_string(),
            labels,
            value: v,
        });
    }
    lint(&exp, &helps)?;
    Ok(exp)
}

/// promtool's lint rules that apply to counters and gauges.
fn lint(exp: &Exposition, helps: &BTreeSet<String>) -> Result<(), String> {
    for (name, kind) in &exp.types {
        if !helps.contains(name) {
            return Err(format!("{name}: no help text"));
        }
        if camel_case(name) {
            return Err(format!("{name}: metric names should be snake_case"));
        }
        let total = name.ends_with("_total");
        if kind == "counter" && !total {
            return Err(format!(
                "{name}: counter metrics should have a _total suffix"
            ));
        }
        if kind != "counter" && total {
            return Err(format!(
                "{name}: non-counter metrics should not end in _total"
            ));
        }
        if kind != "histogram" && kind != "summary" && name.ends_with("_count") {
            return Err(format!(
                "{name}: only histograms and summaries end in _count"
            ));
        }
    }
    for s in &exp.samples {
        if !exp.types.contains_key(family_of(&s.name, &exp.types)) {
            return Err(format!("{}: a sample with no TYPE", s.name));
        }
        if let Some(l) = s.labels.keys().find(|l| camel_case(l)) {
            return Err(format!("{}: label {l} should be snake_case", s.name));
        }
        if exp.types[family_of(&s.name, &exp.types)] == "counter"
            && (s.value.is_nan() || s.value < 0.0)
        {
            return Err(format!("{}: a counter below 0", s.name));
        }
    }
    Ok(())
}

/// `promtool check metrics` on `text` where promtool is installed (Debian's `prometheus`
/// package); `None` where it is not.
pub fn promtool(text: &str) -> Option<Result<(), String>> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("writing to promtool");
    let out = child.wait_with_output().expect("promtool");
    Some(if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    })
}

#[test]
fn the_checker_accepts_good_text_and_rejects_bad() {
    let good = "# HELP a_total Things.\n# TYPE a_total counter\na_total{x=\"1\",UUID=\"q\\\"\\\\\"} 3\na_total{x=\"2\"} 0\n# HELP b_seconds Time.\n# TYPE b_seconds gauge\nb_seconds 1e-3\n";
    let e = check(good).unwrap();
    assert_eq!(e.value("a_total", &[("UUID", "q\"\\")]), Some(3.0));
    for bad in [
        "# TYPE a counter\na 1\n", // counter without _total, no HELP
        "# HELP a A.\n# TYPE a gauge\na{x=1} 1\n", // unquoted label
        "# HELP a A.\n# TYPE a gauge\na 1\n# HELP b B.\n# TYPE b gauge\nb 1\na 2\n", // split family
        "# HELP a A.\n# TYPE a gauge\na 1\na 1\n", // same series twice
        "# HELP a A.\n# TYPE a gauge\na one\n", // not a number
        "# HELP a A.\n# TYPE a gauge\na{x=\"1\"} 1", // no final newline
        "# HELP a A.\n# TYPE a gauge\na{modelName=\"x\"} 1\n", // camelCase label
        "# HELP a_total A.\n# TYPE a_total gauge\na_total 1\n", // gauge ending in _total
    ] {
        assert!(check(bad).is_err(), "accepted:\n{bad}");
    }
}
