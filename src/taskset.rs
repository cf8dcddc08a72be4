//! Task-set files: the TOML format `wcetctl admit` and `suggest` read, with errors that name the
//! task and the field. Checks here are only about the file; the daemon checks values against the
//! device. A file becomes the analysis's own [`Task`]s; the bus face turns those into wire types.
//!
//! ```toml
//! [[task]]
//! name = "camera"
//! kernels = ["needle", "bfs"]   # launched in this order by every job
//! sms = 64                      # partition size (optional for Suggest)
//! period_ns = 10_000_000
//! deadline_ns = 8_000_000       # at most period_ns
//! ```

use anyhow::{anyhow, bail, Context};
use std::path::Path;

use crate::admission::{Task, Unsized};

/// One `[[task]]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskSpec {
    pub name: String,
    pub kernels: Vec<String>,
    pub sms: Option<u32>,
    pub period_ns: u64,
    pub deadline_ns: u64,
}

impl TaskSpec {
    /// The task for `Check`/`CheckShared`, which need a partition size.
    pub fn to_task(&self) -> anyhow::Result<Task> {
        let sms = self.sms.ok_or_else(|| {
            anyhow!(
                "task `{}`, field sms: missing; accepted: a partition size in SMs, e.g. sms = 64",
                self.name
            )
        })?;
        Ok(Task {
            name: self.name.clone(),
            kernels: self.kernels.clone(),
            sms,
            period_ns: self.period_ns,
            deadline_ns: self.deadline_ns,
        })
    }

    /// The task for `Suggest`, which chooses the partition size itself (`sms` is ignored).
    pub fn to_unsized(&self) -> Unsized {
        Unsized {
            name: self.name.clone(),
            kernels: self.kernels.clone(),
            period_ns: self.period_ns,
            deadline_ns: self.deadline_ns,
        }
    }
}

/// Read a task-set file.
pub fn load(path: &Path) -> anyhow::Result<Vec<TaskSpec>> {
    // Far above any task set (MAX_TASKS tasks of MAX_LAUNCHES launches are a few MiB).
    const MAX_TASK_SET_BYTES: u64 = 64 << 20;
    let text = crate::manifest::read_text_limited(path, MAX_TASK_SET_BYTES)
        .with_context(|| format!("reading task set {}", path.display()))?;
    parse(&text).with_context(|| format!("task set {}", path.display()))
}

/// Parse a task set, one task at a time so that an error names the task it is in.
pub fn parse(text: &str) -> anyhow::Result<Vec<TaskSpec>> {
    let doc: toml::Table = toml::from_str(text).map_err(|e| {
        // TOML's integers are signed 64-bit: a period the bus would take does not parse here.
        let limit = if e.message().contains("too large") {
            "; accepted: integers up to 9223372036854775807 (2^63 - 1, TOML's largest), so periods and deadlines below about 292 years"
        } else {
            ""
        };
        anyhow::anyhow!("not valid TOML: {}{limit}", e.to_string().trim_end())
    })?;
    if let Some(key) = doc.keys().find(|k| *k != "task") {
        bail!("unknown top-level key `{key}`; accepted: [[task]] tables only");
    }
    let Some(list) = doc.get("task") else {
        bail!("no tasks; accepted: one or more [[task]] tables");
    };
    let list = list
        .as_array()
        .context("`task` must be an array of tables; write each as [[task]]")?;
    if list.is_empty() {
        bail!("no tasks; accepted: one or more [[task]] tables");
    }
    list.iter()
        .enumerate()
        .map(|(i, value)| parse_task(i, value))
        .collect()
}

fn parse_task(index: usize, value: &toml::Value) -> anyhow::Result<TaskSpec> {
    let label = match value.get("name").and_then(toml::Value::as_str) {
        Some(name) => format!("task `{name}` (number {})", index + 1),
        None => format!("task number {}", index + 1),
    };
    let table = value
        .as_table()
        .ok_or_else(|| anyhow!("{label}: not a table; write it as [[task]]"))?;
    const FIELDS: [&str; 5] = ["name", "kernels", "sms", "period_ns", "deadline_ns"];
    if let Some(key) = table.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        bail!(
            "{label}, field {key}: unknown; accepted: {}",
            FIELDS.join(", ")
        );
    }
    let spec = TaskSpec {
        name: required(table, "name", &label)?,
        kernels: required(table, "kernels", &label)?,
        sms: field(table, "sms", &label)?,
        period_ns: required(table, "period_ns", &label)?,
        deadline_ns: required(table, "deadline_ns", &label)?,
    };
    if spec.kernels.is_empty() {
        bail!("{label}, field kernels: empty; accepted: at least one kernel name");
    }
    Ok(spec)
}

/// One field, deserialised on its own so that a type error names it.
fn field<T: serde::de::DeserializeOwned>(
    table: &toml::Table,
    key: &str,
    label: &str,
) -> anyhow::Result<Option<T>> {
    table
        .get(key)
        .map(|v| {
            T::deserialize(v.clone()).map_err(|e| anyhow!("{label}, field {key}: {}", e.message()))
        })
        .transpose()
}

fn required<T: serde::de::DeserializeOwned>(
    table: &toml::Table,
    key: &str,
    label: &str,
) -> anyhow::Result<T> {
    field(table, key, label)?.ok_or_else(|| anyhow!("{label}, field {key}: missing"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A period too large for TOML's integers says what is accepted (it said only "u64 value
    /// was too large").
    #[test]
    fn a_period_too_large_for_toml_says_the_limit() {
        let text = "[[task]]\nname = \"a\"\nkernels = [\"k\"]\nsms = 8\nperiod_ns = 9223372036854775808\ndeadline_ns = 1\n";
        let e = format!("{:#}", parse(text).unwrap_err());
        assert!(
            e.contains("line 5") && e.contains("accepted: integers up to 9223372036854775807"),
            "{e}"
        );
    }

    #[test]
    fn the_example_file_parses() {
        for name in ["example.toml", "co-running.toml"] {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("calibration/tasksets")
                .join(name);
            let tasks = load(&path).unwrap();
            assert!(tasks.len() >= 2);
            assert!(tasks
                .iter()
                .all(|t| t.sms.is_some() && t.deadline_ns <= t.period_ns));
        }
    }

    #[test]
    fn errors_name_the_task_and_field() {
        let text = "[[task]]\nname = \"a\"\nkernels = [\"needle\"]\nsms = 8\nperiod_ns = 10\ndeadline_ns = 10\n\
                    [[task]]\nname = \"b\"\nkernels = [\"needle\"]\nperiod_ns = \"soon\"\ndeadline_ns = 10\n";
        let e = parse(text).unwrap_err().to_string();
        assert!(e.contains("task `b`") && e.contains("period_ns"), "{e}");
        let e = parse("[[task]]\nname = \"c\"\nkernels = []\nperiod_ns = 1\ndeadline_ns = 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("task `c`") && e.contains("kernels"), "{e}");
        let e = parse("[[task]]\nname = \"d\"\nkernels = [\"x\"]\nperiod = 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("task `d`") && e.contains("period"), "{e}");
        let spec =
            &parse("[[task]]\nname = \"e\"\nkernels = [\"x\"]\nperiod_ns = 1\ndeadline_ns = 1\n")
                .unwrap()[0];
        let e = spec.to_task().unwrap_err().to_string();
        assert!(e.contains("task `e`") && e.contains("sms"), "{e}");
        assert!(parse("").unwrap_err().to_string().contains("no tasks"));
    }
}
