//! Jobs a previous run did not finish: each job is recorded in the state directory from the
//! moment it is queued (`job-running-<fingerprint digest>.json`, written atomically), marked when
//! the worker starts it, and taken out when it ends or is cancelled. A record found at start
//! means the process died before the job ended (SIGKILL, a power cut, a crash), during it or
//! before it started: its kernels keep the bounds they had when the process stopped (from before
//! the job, or what it published before then), which is safe, but nothing else would say the
//! recalibration an operator asked for never happened. `Health` says so, as after a failed job,
//! and a warning is logged, until a job succeeds: the records stay until then, across restarts,
//! and a second interrupted run adds its own rather than replacing the first's.

use chrono::{DateTime, Utc};
use std::path::{Path, PathBuf};

use crate::gpu::DeviceInfo;
use crate::store::Store;

#[derive(serde::Serialize, serde::Deserialize)]
struct Record {
    /// The process that ran it: job numbers start afresh with every run.
    pid: u32,
    /// Which run of the daemon queued it ([`run_id`]): a pid can repeat (PID 1 in a container),
    /// and job numbers do. Empty in records before 2026-11-24.
    #[serde(default)]
    run: String,
    job: u64,
    /// What the job did: `calibrating`, `importing samples of`, `importing a bundle of`.
    what: String,
    kernels: Vec<String>,
    /// When it was queued, then when it started.
    started_at: DateTime<Utc>,
    /// Not started yet (records before 2026-11-24 are of started jobs only).
    #[serde(default)]
    queued: bool,
}

/// This run of the daemon: its pid and the time it first recorded a job, in nanoseconds.
fn run_id() -> &'static str {
    static RUN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    RUN.get_or_init(|| {
        let nanos = Utc::now().timestamp_nanos_opt().unwrap_or_default();
        format!("{}-{nanos}", std::process::id())
    })
}

/// The record file of one device's jobs. Every change is a read, an edit and an atomic write,
/// made under one lock: the bus threads (queueing, cancelling) and the GPU worker (starting,
/// ending) all change it, and two at once would lose one's edit or share the temporary file.
pub(super) struct JobRecords {
    path: PathBuf,
    /// `set-aside-<fingerprint digest>.json`: the damaged files set aside at starts since the
    /// last successful job, so that `Health` names them until then across restarts (a restart
    /// before a job, a crash loop or `--no-initial-calibration`, made it `ok` at once).
    set_aside: PathBuf,
    lock: std::sync::Mutex<()>,
}

impl JobRecords {
    /// Where the running and interrupted jobs of `device` are recorded.
    pub(super) fn of(store: &Store, device: &DeviceInfo) -> JobRecords {
        let digest = device.fingerprint.digest();
        JobRecords {
            path: store.dir().join(format!("job-running-{digest}.json")),
            set_aside: crate::store::set_aside_notices_path(store.dir(), &device.fingerprint),
            lock: std::sync::Mutex::new(()),
        }
    }

    /// At start: `now`, the damaged files this start set aside, with those earlier starts set
    /// aside since the last successful job (oldest first), recorded for the next start.
    pub(super) fn set_aside(&self, now: &[String]) -> Vec<String> {
        let (mut all, damaged) = match std::fs::read(&self.set_aside) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (Vec::new(), None),
            read => match read.map_err(|e| e.to_string()).and_then(|bytes| {
                serde_json::from_slice::<Vec<String>>(&bytes).map_err(|e| e.to_string())
            }) {
                Ok(all) => (all, None),
                // Its notices are lost, so this one says so (it had gone without a word); the
                // file is kept aside for whoever wants to read what is left of it.
                Err(why) => {
                    crate::store::quarantine(&self.set_aside, "set-aside notices", &why);
                    let notice = format!(
                        "the record of files set aside at earlier starts ({}) was damaged ({why}) and is moved aside: earlier notices may be missing",
                        self.set_aside.display()
                    );
                    (Vec::new(), Some(notice))
                }
            },
        };
        let now: Vec<String> = now.iter().cloned().chain(damaged).collect();
        for notice in &now {
            if !all.contains(notice) {
                all.push(notice.clone());
            }
        }
        // The latest few: each start of a crash loop names a new `.corrupt-<time>` file.
        let extra = all.len().saturating_sub(SET_ASIDE_KEPT);
        all.drain(..extra);
        if !now.is_empty() {
            let written = crate::store::write_atomically(&self.set_aside, |out| {
                serde_json::to_writer(out, &all).map_err(std::io::Error::other)
            });
            if let Err(e) = written {
                tracing::warn!(path = %self.set_aside.display(), error = %e, "cannot record the files set aside; the next start may not name them");
            }
        }
        all
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    fn edit(&self, change: impl FnOnce(&mut Vec<Record>)) {
        let _turn = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // A record that cannot be read was named at start (`read`). A damaged one is moved aside
        // rather than written over, so that what it held is kept; one that cannot be read (its
        // mode, an I/O error) is left alone: moved aside, the next start would not name it.
        let mut all = match records(&self.path) {
            Ok(all) => all,
            Err(Unreadable::Damaged) => {
                crate::store::quarantine(&self.path, "job record", "does not parse");
                Vec::new()
            }
            Err(Unreadable::Io(e)) => {
                tracing::warn!(path = %self.path.display(), error = %e, "the record of running jobs cannot be read, so it is not updated; a crash during a job may not be named at the next start");
                return;
            }
        };
        change(&mut all);
        write(&self.path, &all);
    }

    /// Record that `job` is queued, beside what earlier runs left unfinished.
    pub(super) fn queued(&self, job: u64, what: &str, kernels: &[String]) {
        self.edit(|all| all.push(Record::new(job, what, kernels, true)));
    }

    /// Record that `job` is running (queued before, or not recorded then: added now).
    pub(super) fn started(&self, job: u64, what: &str, kernels: &[String]) {
        self.edit(|all| match all.iter_mut().find(|r| r.of_this_run(job)) {
            Some(r) => {
                r.queued = false;
                r.started_at = Utc::now();
            }
            None => all.push(Record::new(job, what, kernels, false)),
        });
    }

    /// `job` ended, or was cancelled before it started: its record goes, and when it succeeded
    /// every earlier run's too (as `Health` turns `ok` after a successful job, whatever failed
    /// before it); this run's queued jobs stay recorded until they end.
    pub(super) fn ended(&self, job: u64, succeeded: bool) {
        self.edit(|all| {
            all.retain(|r| !r.of_this_run(job) && (!succeeded || (r.run == run_id() && r.queued)))
        });
        // Not from a directory this daemon no longer holds: the notices are another's then.
        let ours = crate::store::still_locked(&self.set_aside).is_ok();
        if succeeded && ours && std::fs::remove_file(&self.set_aside).is_ok() {
            let _ = crate::store::sync_directory_of(&self.set_aside);
        }
    }
}

impl Record {
    fn new(job: u64, what: &str, kernels: &[String], queued: bool) -> Record {
        Record {
            pid: std::process::id(),
            run: run_id().to_string(),
            job,
            what: what.to_string(),
            kernels: kernels.to_vec(),
            started_at: Utc::now(),
            queued,
        }
    }

    fn of_this_run(&self, job: u64) -> bool {
        self.job == job && self.run == run_id()
    }
}

/// Why the record of jobs could not be read.
enum Unreadable {
    Damaged,
    Io(std::io::Error),
}

fn records(path: &Path) -> Result<Vec<Record>, Unreadable> {
    match std::fs::read(path) {
        Ok(text) => serde_json::from_slice(&text).map_err(|_| Unreadable::Damaged),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(Unreadable::Io(e)),
    }
}

fn write(path: &Path, records: &[Record]) {
    let written = if records.is_empty() {
        match crate::store::still_locked(path).and_then(|()| std::fs::remove_file(path)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            // The removal made durable, so that a power cut cannot bring the record back.
            _ => crate::store::sync_directory_of(path),
        }
    } else {
        crate::store::write_atomically(path, |out| {
            serde_json::to_writer(out, records).map_err(std::io::Error::other)
        })
    };
    if let Err(e) = written {
        tracing::warn!(path = %path.display(), error = %e, "cannot update the record of running jobs; a crash during one may not be named at the next start");
    }
}

/// Notices of files set aside that are kept for `Health`, the latest.
const SET_ASIDE_KEPT: usize = 5;

/// Interrupted jobs of each kind (started, queued) that `Health` describes one by one.
const SHOWN: usize = 3;

/// At start: what earlier runs left unfinished, for `Health`, with the commands to run again
/// (starting `wcetctl`, as [`super::ServiceConfig::wcetctl`] says). The records stay until a job
/// succeeds.
pub(super) fn read(path: &Path, wcetctl: &str) -> Option<String> {
    let all = match records(path) {
        Ok(all) if all.is_empty() => return None,
        Ok(all) => all,
        Err(_) => {
            return Some(format!(
                "an earlier run ended during a job whose record ({}) cannot be read: its kernels keep the bounds they had when it stopped",
                path.display()
            ))
        }
    };
    let (running, waiting) = (listed(&all, false), listed(&all, true));
    let again = to_run_again(&all, wcetctl);
    let during = match (running.is_empty(), waiting.is_empty()) {
        (false, true) => format!("during {}", running.join(" and ")),
        (true, false) => format!("before {} started", waiting.join(" and ")),
        _ => format!(
            "during {}, before {} started",
            running.join(" and "),
            waiting.join(" and ")
        ),
    };
    Some(format!(
        "an earlier run ended {during}: those kernels keep the bounds they had when it stopped (from before the job, or what it published before then); run {}",
        again.join(" and ")
    ))
}

/// One interrupted job as `Health` names it.
fn describe(r: &Record) -> String {
    let when = if r.queued { "queued" } else { "started" };
    // Job numbers start afresh with every run: the pid and the time tell which run's it was.
    format!(
        "job {} of pid {} ({} {}, {when} {})",
        r.job,
        r.pid,
        r.what,
        r.kernels.join(", "),
        r.started_at.to_rfc3339()
    )
}

/// The interrupted jobs that had started (or, with `queued`, were waiting), as `Health` lists
/// them.
///
/// The latest few, with a count of the others: ten crashes in a row made a Health of 1.5 KB
/// of near-identical entries.
fn listed(all: &[Record], queued: bool) -> Vec<String> {
    let these: Vec<&Record> = all.iter().filter(|r| r.queued == queued).collect();
    let earlier = these.len().saturating_sub(SHOWN);
    let shown = these[earlier..].iter().map(|r| describe(r));
    let count = (earlier > 0).then(|| {
        format!(
            "{earlier} earlier job{}",
            if earlier == 1 { "" } else { "s" }
        )
    });
    count.into_iter().chain(shown).collect()
}

/// What the operator runs to redo the interrupted work: a recalibration of every kernel an
/// interrupted calibration named, and the import again where an import was interrupted.
fn to_run_again(all: &[Record], wcetctl: &str) -> Vec<String> {
    let mut kernels: Vec<&str> = all
        .iter()
        .filter(|r| r.what == "calibrating")
        .flat_map(|r| r.kernels.iter().map(String::as_str))
        .collect();
    kernels.sort_unstable();
    kernels.dedup();
    let mut again = Vec::new();
    if !kernels.is_empty() {
        again.push(format!("`{wcetctl} recalibrate {}`", kernels.join(" ")));
    }
    if all.iter().any(|r| r.what != "calibrating") {
        again.push("the import again".to_string());
    }
    again
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(path: PathBuf) -> JobRecords {
        JobRecords {
            set_aside: path.with_file_name("set-aside-x.json"),
            path,
            lock: std::sync::Mutex::new(()),
        }
    }

    /// A damaged record is moved aside, not written over, and named; so is a damaged list of
    /// files set aside (it had been dropped without a word).
    #[test]
    fn damaged_records_are_moved_aside_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let records = at(dir.path().join("job-running-x.json"));
        std::fs::write(records.path(), "{").unwrap();
        assert!(read(records.path(), "wcetctl")
            .unwrap()
            .contains("cannot be read"));
        records.queued(1, "calibrating", &["lud".into()]);
        let aside = |prefix: &str| {
            std::fs::read_dir(dir.path())
                .unwrap()
                .filter_map(Result::ok)
                .filter(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.starts_with(prefix) && name.contains(".corrupt-")
                })
                .map(|e| std::fs::read(e.path()).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(aside("job-running-x.json"), [b"{".to_vec()]);
        assert!(read(records.path(), "wcetctl").unwrap().contains("lud"));
        std::fs::write(&records.set_aside, "[\"a (bad)\"").unwrap();
        let notices = records.set_aside(&[]);
        assert!(
            notices.len() == 1 && notices[0].contains("was damaged"),
            "{notices:?}"
        );
        assert_eq!(aside("set-aside-x.json").len(), 1);
        assert_eq!(
            records.set_aside(&[]),
            notices,
            "named at the next start too"
        );
    }

    /// Files set aside at one start are named at the next starts too, until a job succeeds.
    #[test]
    fn files_set_aside_are_remembered_until_a_job_succeeds() {
        let dir = tempfile::tempdir().unwrap();
        let records = at(dir.path().join("job-running-x.json"));
        assert!(records.set_aside(&[]).is_empty());
        assert_eq!(records.set_aside(&["a (bad)".into()]), ["a (bad)"]);
        assert_eq!(
            records.set_aside(&[]),
            ["a (bad)"],
            "a restart before any job"
        );
        assert_eq!(
            records.set_aside(&["b".into(), "a (bad)".into()]),
            ["a (bad)", "b"]
        );
        records.queued(1, "calibrating", &["lud".into()]);
        records.ended(1, false);
        assert_eq!(records.set_aside(&[]), ["a (bad)", "b"], "a failed job");
        records.queued(2, "calibrating", &["lud".into()]);
        records.ended(2, true);
        assert!(records.set_aside(&[]).is_empty());
        // A crash loop names a new file each start: the latest five are kept.
        for i in 0..7 {
            records.set_aside(&[format!("f{i}")]);
        }
        assert_eq!(records.set_aside(&[]), ["f2", "f3", "f4", "f5", "f6"]);
    }

    /// Queued, started, ended: what the next start reads at each point, and what a success
    /// clears (an earlier run's records, this run's ended ones) and keeps (this run's queued).
    #[test]
    fn records_follow_a_job_from_queued_to_ended() {
        let dir = tempfile::tempdir().unwrap();
        let records = at(dir.path().join("job-running-x.json"));
        let earlier = Record {
            pid: std::process::id(),
            run: "an earlier run with the same pid".into(),
            job: 1,
            what: "calibrating".into(),
            kernels: vec!["bfs".into()],
            started_at: Utc::now(),
            queued: false,
        };
        write(records.path(), &[earlier]);
        let pid = std::process::id();
        let kernels = |k: &str| vec![k.to_string()];
        records.queued(1, "calibrating", &kernels("lud"));
        records.queued(2, "calibrating", &kernels("srad"));
        records.started(1, "calibrating", &kernels("lud"));
        let said = read(records.path(), "wcetctl").unwrap();
        assert!(
            said.contains(&format!(
                "during job 1 of pid {pid} (calibrating bfs, started"
            )) && said.contains(&format!("job 1 of pid {pid} (calibrating lud, started"))
                && said.contains(&format!(
                    "before job 2 of pid {pid} (calibrating srad, queued"
                ))
                && said.contains("`wcetctl recalibrate bfs lud srad`"),
            "{said}"
        );
        // This run's job 1 ended well: the earlier run's job 1 goes too, queued job 2 stays.
        records.ended(1, true);
        let said = read(records.path(), "wcetctl").unwrap();
        assert!(
            said.starts_with(&format!(
                "an earlier run ended before job 2 of pid {pid} (calibrating srad, queued"
            )) && !said.contains("bfs")
                && !said.contains("lud"),
            "{said}"
        );
        records.ended(2, false);
        assert_eq!(read(records.path(), "wcetctl"), None);
        assert!(!records.path().exists());
    }

    /// Ten runs killed during a job: the latest three are described, the others counted, and
    /// every kernel is still in the advice.
    #[test]
    fn many_interrupted_runs_are_counted_not_listed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("job-running-x.json");
        let all: Vec<Record> = (0..10)
            .map(|i| Record {
                pid: 100 + i,
                run: format!("run {i}"),
                job: 1,
                what: "calibrating".into(),
                kernels: vec![format!("k{i}")],
                started_at: Utc::now(),
                queued: false,
            })
            .collect();
        write(&path, &all);
        let said = read(&path, "wcetctl").unwrap();
        assert!(
            said.contains("during 7 earlier jobs and job 1 of pid 107 (calibrating k7"),
            "{said}"
        );
        assert_eq!(said.matches("job 1 of pid").count(), 3, "{said}");
        assert!(said.contains("`wcetctl recalibrate k0 k1 k2"), "{said}");
    }
}
