//! How a request fails: [`ServiceError`], what was wrong and what is accepted, with the kind the
//! bus maps to one of the design's error names (`org.wcetd.Error.*`). A leaf: the service and the
//! analyses beside it (admission) fail with it, and `dbus.rs` names it on the wire.

use crate::gpu::Interference;

/// A failed request: what was wrong and what is accepted, with the kind the bus maps to a name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    #[error("{0}")]
    InvalidArgs(String),
    #[error("{0}")]
    UnknownKernel(String),
    #[error("{0}")]
    NotCalibrated(String),
    #[error("{0}")]
    InvalidPartition(String),
    #[error("{0}")]
    Infeasible(String),
    #[error("{0}")]
    Busy(String),
    #[error("{0}")]
    AccessDenied(String),
    /// The request was carried out, but not made durable (a save failed).
    #[error("{0}")]
    Failed(String),
}

pub type Result<T> = std::result::Result<T, ServiceError>;

/// How to get a calibration of `kernel`, on the command line (starting `wcetctl`, as
/// [`crate::service::ServiceConfig::wcetctl`] says for the device) and on the bus: measured here
/// when the daemon can run it (`runnable`), otherwise imported, since it has nothing to measure.
pub fn how_to_calibrate(
    wcetctl: &str,
    kernel: &str,
    tag: Option<Interference>,
    runnable: bool,
) -> String {
    match (tag, runnable) {
        (Some(t), true) => format!(
            "get it with `{wcetctl} recalibrate --interference {t} {kernel}` or Calibration1.RecalibrateWith([\"{kernel}\"], {{\"interference\": <[\"{t}\"]>}}), then wait for JobFinished"
        ),
        (None, true) => format!(
            "get it with `{wcetctl} recalibrate {kernel}` or Calibration1.Recalibrate([\"{kernel}\"]), then wait for JobFinished"
        ),
        (tag, false) => {
            let t = tag.unwrap_or(Interference::Isolated);
            format!(
                "the daemon has nothing to run for `{kernel}` (its bounds are imported), so import samples measured under {t}: `{wcetctl} import --interference {t} --samples FILE` or Calibration1.ImportSamples(\"{kernel}\", samples, {{\"interference\": <\"{t}\">}}), then wait for JobFinished"
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A black-box run was told to recalibrate an imported kernel, which the daemon then
    /// refused: it has nothing to run for it.
    #[test]
    fn the_advice_for_an_imported_kernel_is_to_import() {
        let imported = how_to_calibrate("wcetctl", "lab.k", Some(Interference::Contended), false);
        assert!(
            imported.contains("`wcetctl import --interference contended --samples FILE`"),
            "{imported}"
        );
        assert!(!imported.contains("recalibrate"), "{imported}");
        let measured = how_to_calibrate("wcetctl", "bfs", Some(Interference::Contended), true);
        assert!(
            measured.contains("`wcetctl recalibrate --interference contended bfs`"),
            "{measured}"
        );
    }
}
