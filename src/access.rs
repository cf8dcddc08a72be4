//! Who may operate the daemon. The system bus policy file is one wall; this is the second, so a
//! private or session bus is protected too: `Calibration1` callers are looked up through the bus
//! (their UID and groups) and refused unless root, in the operator group, or the daemon's own user
//! (who could already stop or ptrace the daemon, so gains nothing). `Monitor1.Report` can raise
//! bounds, so its callers are checked the same way ([`ReporterPolicy`]): operators and the
//! reporter group.

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Mutex, PoisonError};
use zbus::fdo::DBusProxy;
use zbus::message::Header;
use zbus::names::BusName;
use zbus::Connection;

use crate::service::ServiceError;

#[derive(Debug, Clone)]
pub struct OperatorPolicy {
    /// The operator group's name, and its GID when it exists on this machine.
    pub group: String,
    pub gid: Option<u32>,
    pub own_uid: u32,
}

impl OperatorPolicy {
    pub fn new(group: &str) -> Self {
        let gid = gid_of(group);
        if gid.is_none() {
            tracing::warn!(
                "operator group `{group}` does not exist on this machine: only root and the daemon's own user may recalibrate, import or cancel (create the group, or give --operator-group an existing one)"
            );
        }
        OperatorPolicy {
            group: group.to_string(),
            gid,
            own_uid: current_uid(),
        }
    }

    /// Whether `uid` with supplementary `groups` may operate.
    pub fn allows(&self, uid: u32, groups: &[u32]) -> bool {
        uid == 0 || uid == self.own_uid || self.gid.is_some_and(|g| groups.contains(&g))
    }

    /// Refuse the caller of `method` unless allowed.
    pub async fn check(
        &self,
        conn: &Connection,
        header: &Header<'_>,
        method: &str,
    ) -> Result<(), ServiceError> {
        let denied = |who: String| {
            ServiceError::AccessDenied(format!(
                "{method} is for operators; {who} is not root, not the daemon's user (UID {}) and not in group `{}`; accepted: root, the daemon's user or a member of `{}`",
                self.own_uid, self.group, self.group
            ))
        };
        let (uid, groups) = caller(conn, header, method).await.map_err(|e| match e {
            Caller::Unknown(who) => denied(who),
            Caller::Failed(e) => e,
        })?;
        if self.allows(uid, &groups) {
            Ok(())
        } else {
            // The object path says which GPU was asked (`/org/wcetd/Wcetd1/gpu/N`).
            let path = header.path().map(|p| p.to_string()).unwrap_or_default();
            tracing::warn!(uid, method, path, "refused an operator call");
            Err(denied(format!("UID {uid}")))
        }
    }
}

/// Who may report launch times (`Monitor1.Report`): operators and the members of the reporter
/// group. A connection's credentials are fixed when it connects and unique names are never
/// reused on a bus, so each sender is looked up once: a report costs no extra round trip.
#[derive(Debug)]
pub struct ReporterPolicy {
    pub operators: OperatorPolicy,
    pub group: String,
    pub gid: Option<u32>,
    /// Sender unique name -> (allowed, its UID).
    decided: Mutex<HashMap<String, (bool, u32)>>,
}

/// Senders remembered before the cache is cleared (a daemon sees few distinct reporters).
const DECISIONS_KEPT: usize = 4096;

impl ReporterPolicy {
    pub fn new(operators: OperatorPolicy, group: &str) -> Self {
        let gid = gid_of(group);
        if gid.is_none() {
            tracing::warn!(
                "reporter group `{group}` does not exist on this machine: only operators may report launch times (create the group, or give --report-group an existing one)"
            );
        }
        ReporterPolicy {
            operators,
            group: group.to_string(),
            gid,
            decided: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `uid` with supplementary `groups` may report.
    pub fn allows(&self, uid: u32, groups: &[u32]) -> bool {
        self.operators.allows(uid, groups) || self.gid.is_some_and(|g| groups.contains(&g))
    }

    /// Refuse the caller of `method` unless allowed.
    pub async fn check(
        &self,
        conn: &Connection,
        header: &Header<'_>,
        method: &str,
    ) -> Result<(), ServiceError> {
        let denied = |who: String| {
            ServiceError::AccessDenied(format!(
                "{method} can raise bounds, so it is for root, the daemon's user and groups `{}` and `{}`; {who} is none of them; accepted: a caller in one of those groups",
                self.operators.group, self.group
            ))
        };
        let sender = header.sender().map(|s| s.to_string());
        let remembered = sender.as_ref().and_then(|s| {
            self.decided
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(s)
                .copied()
        });
        // With the UID it was decided for, which the refusal names (it named the connection).
        let (allowed, uid) = match remembered {
            Some(decision) => decision,
            None => {
                let (uid, groups) = caller(conn, header, method).await.map_err(|e| match e {
                    Caller::Unknown(who) => denied(who),
                    Caller::Failed(e) => e,
                })?;
                let allowed = self.allows(uid, &groups);
                if !allowed {
                    let path = header.path().map(|p| p.to_string()).unwrap_or_default();
                    tracing::warn!(uid, method, path, "refused a report");
                }
                if let Some(s) = sender {
                    let mut decided = self.decided.lock().unwrap_or_else(PoisonError::into_inner);
                    if decided.len() >= DECISIONS_KEPT {
                        decided.clear();
                    }
                    decided.insert(s, (allowed, uid));
                }
                (allowed, uid)
            }
        };
        if allowed {
            Ok(())
        } else {
            Err(denied(format!("UID {uid}")))
        }
    }
}

enum Caller {
    /// Who the caller is could not be established: named for the refusal.
    Unknown(String),
    Failed(ServiceError),
}

/// The caller's UID and groups, as the bus reports them (or the user database, for buses that do
/// not report groups).
async fn caller(
    conn: &Connection,
    header: &Header<'_>,
    method: &str,
) -> Result<(u32, Vec<u32>), Caller> {
    let Some(sender) = header.sender() else {
        return Err(Caller::Unknown("a caller with no bus name".into()));
    };
    let creds = async {
        let proxy = DBusProxy::new(conn).await?;
        proxy
            .get_connection_credentials(BusName::Unique(sender.clone()))
            .await
    }
    .await
    .map_err(|e| {
        Caller::Failed(ServiceError::AccessDenied(format!(
            "cannot identify the caller of {method}: {e}"
        )))
    })?;
    let uid = creds
        .unix_user_id()
        .ok_or_else(|| Caller::Unknown(format!("{sender} (no UID)")))?;
    let groups = creds
        .unix_group_ids()
        .cloned()
        .unwrap_or_else(|| groups_of(uid));
    Ok((uid, groups))
}

fn current_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn gid_of(group: &str) -> Option<u32> {
    let name = CString::new(group).ok()?;
    // SAFETY: getgrnam takes a NUL-terminated string and returns NULL or a pointer to static
    // storage, which is read at once, before any other call could overwrite it.
    let entry = unsafe { libc::getgrnam(name.as_ptr()) };
    // SAFETY: checked non-null just before reading.
    (!entry.is_null()).then(|| unsafe { (*entry).gr_gid })
}

/// Supplementary groups of `uid` from the user database, for buses that do not report them.
fn groups_of(uid: u32) -> Vec<u32> {
    // SAFETY: getpwuid returns NULL or a pointer to static storage that is read at once.
    let pw = unsafe { libc::getpwuid(uid) };
    if pw.is_null() {
        return Vec::new();
    }
    // SAFETY: pw is non-null; its fields are valid C strings / values until the next call.
    let (name, gid) = unsafe { ((*pw).pw_name, (*pw).pw_gid) };
    let mut groups = vec![0 as libc::gid_t; 256];
    let mut count = groups.len() as libc::c_int;
    // SAFETY: the buffer holds `count` entries; getgrouplist writes at most that many.
    let rc = unsafe { libc::getgrouplist(name, gid, groups.as_mut_ptr(), &mut count) };
    if rc < 0 {
        return vec![gid];
    }
    groups.truncate(count.max(0) as usize);
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_own_user_and_group_members_may_operate() {
        let policy = OperatorPolicy {
            group: "wcetd".into(),
            gid: Some(970),
            own_uid: 1000,
        };
        assert!(policy.allows(0, &[]));
        assert!(policy.allows(1000, &[]));
        assert!(policy.allows(1001, &[5, 970]));
        assert!(!policy.allows(1001, &[5]));
        let no_group = OperatorPolicy {
            gid: None,
            ..policy
        };
        assert!(!no_group.allows(1001, &[970]));
    }

    #[test]
    fn operators_and_the_reporter_group_may_report() {
        let operators = OperatorPolicy {
            group: "wcetd".into(),
            gid: Some(970),
            own_uid: 1000,
        };
        let policy = ReporterPolicy {
            operators,
            group: "wcetd-report".into(),
            gid: Some(971),
            decided: Mutex::new(HashMap::new()),
        };
        assert!(policy.allows(0, &[]) && policy.allows(1000, &[]));
        assert!(policy.allows(1001, &[970]) && policy.allows(1002, &[5, 971]));
        assert!(!policy.allows(1003, &[5]));
    }
}
