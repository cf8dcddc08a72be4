//! `admit` and `suggest`: task sets checked by the daemon's `org.wcetd.Admission1`.

use super::*;

pub(crate) async fn admit(
    json: bool,
    conn: &zbus::Connection,
    file: &Path,
    shared: bool,
    accept: Accept,
) -> anyhow::Result<()> {
    said_in_json(json, admit_file(json, conn, file, shared, accept).await)
}

/// With `--json`, an error that stops a check before any verdict (a malformed file, an unknown
/// kernel, no daemon) is a JSON document too, `{"admitted": false, "error": ...}`: a script
/// that reads standard output read nothing before. The exit status stays 2.
fn said_in_json(json: bool, result: anyhow::Result<()>) -> anyhow::Result<()> {
    match result {
        Err(e) if json && !e.is::<NotAdmitted>() => {
            let v = serde_json::json!({"admitted": false, "error": format!("{e:#}")});
            println!("{}", serde_json::to_string_pretty(&v)?);
            Err(e)
        }
        other => other,
    }
}

async fn admit_file(
    json: bool,
    conn: &zbus::Connection,
    file: &Path,
    shared: bool,
    accept: Accept,
) -> anyhow::Result<()> {
    let tasks = taskset::load(file)?
        .iter()
        .map(taskset::TaskSpec::to_task)
        .collect::<anyhow::Result<Vec<_>>>()
        .with_context(|| format!("task set {}", file.display()))?;
    let answer = admission_bus::admit(conn, object(), &tasks, shared, accept.policy())
        .await
        .map_err(|e| refused_by_error(json, file, e))?;
    print_verdict(json, &answer, None)
}

/// A set the daemon refuses with an error rather than a verdict: no sizes admit it
/// (`Infeasible`), or a kernel has no bound to judge it on (`NotCalibrated`). That is still the
/// daemon's answer that the set is not admitted, so it exits 1 as a verdict does, the reason
/// printed where a verdict's are; 2 read as no daemon or bad input (a hunt found `suggest` exit
/// 2 where `admit` exits 1 for the same file). Other errors stay errors.
fn refused_by_error(json: bool, file: &Path, e: zbus::Error) -> anyhow::Error {
    const ANSWERS: [&str; 2] = [
        "org.wcetd.Error.Infeasible",
        "org.wcetd.Error.NotCalibrated",
    ];
    match &e {
        zbus::Error::MethodError(name, msg, _) if ANSWERS.contains(&name.as_str()) => {
            let reason = msg.clone().unwrap_or_default();
            if json {
                let v = serde_json::json!({"admitted": false, "reasons": [reason], "error_name": name.as_str()});
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            } else {
                println!("not admitted: {reason} ({name})");
            }
            NotAdmitted.into()
        }
        _ => explain(e).context(format!("{}", file.display())),
    }
}

/// The verdict (with the suggested sizes, if any): exit status 1 when not admitted.
pub(crate) fn print_verdict(
    json: bool,
    answer: &admission_bus::Detailed,
    suggested: Option<&[(String, u32)]>,
) -> anyhow::Result<()> {
    if json {
        let tasks: Vec<serde_json::Value> = answer
            .tasks
            .iter()
            .map(|t| {
                serde_json::json!({"name": t.name, "response_ns": t.response_ns, "deadline_ns": t.deadline_ns,
                    "partition_sms": t.partition_sms, "slack_ns": t.slack_ns, "exceedance": t.exceedance,
                    "interference": t.interference, "stale": t.stale, "job_exceedance": t.job_exceedance})
            })
            .collect();
        let mut v = serde_json::json!({"admitted": answer.admitted, "layout": answer.layout,
            "used_sms": answer.used_sms, "total_sms": answer.total_sms, "reasons": answer.reasons,
            "accepted": answer.accepted, "configured_exceedance": answer.configured_exceedance, "tasks": tasks});
        if let Some(bounds) = &answer.bounds {
            v["bounds"] = bounds
                .iter()
                .map(|b| {
                    serde_json::json!({"kernel": b.kernel, "partition_sms": b.partition_sms,
                        "bound_ns": b.bound_ns, "calibration": b.calibration, "basis": b.basis,
                        "interference": b.interference})
                })
                .collect();
        }
        if let Some(s) = suggested {
            v["suggested"] = s
                .iter()
                .map(|(n, m)| serde_json::json!({"name": n, "sms": m}))
                .collect();
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        if let Some(s) = suggested {
            for (name, sms) in s {
                println!("suggested: {name} on {sms} SMs");
            }
        }
        print!("{}", admission_bus::render(answer));
    }
    if answer.admitted {
        Ok(())
    } else {
        Err(NotAdmitted.into())
    }
}

pub(crate) async fn suggest(
    json: bool,
    conn: &zbus::Connection,
    file: &Path,
    accept: Accept,
) -> anyhow::Result<()> {
    said_in_json(json, suggest_sizes(json, conn, file, accept).await)
}

async fn suggest_sizes(
    json: bool,
    conn: &zbus::Connection,
    file: &Path,
    accept: Accept,
) -> anyhow::Result<()> {
    let specs = taskset::load(file)?;
    let free: Vec<_> = specs
        .iter()
        .map(|t| admission_bus::unsized_to_wire(&t.to_unsized()))
        .collect();
    let proxy = admission_bus::Admission1Proxy::builder(conn)
        .path(object())
        .build()
        .await?;
    let sizes = proxy
        .suggest(&free)
        .await
        .map_err(|e| refused_by_error(json, file, e))?;
    let tasks: Vec<_> = specs
        .iter()
        .zip(&sizes)
        .map(|(t, (_, sms))| wcetd::admission::Task {
            name: t.name.clone(),
            kernels: t.kernels.clone(),
            sms: *sms,
            period_ns: t.period_ns,
            deadline_ns: t.deadline_ns,
        })
        .collect();
    let mut answer = admission_bus::admit(conn, object(), &tasks, false, accept.policy())
        .await
        .map_err(|e| refused_by_error(json, file, e))?;
    // The daemon's advice names `admit`, which would check the file's own sizes, not these (a
    // hunt ran it as printed and got another verdict).
    for reason in &mut answer.reasons {
        *reason = reason.replace(" admit --accept-", " suggest --accept-");
    }
    print_verdict(json, &answer, Some(&sizes))
}
