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

/// How to get a calibration of `kernel`, on the command line and on the bus.
pub fn how_to_calibrate(kernel: &str, tag: Option<Interference>) -> String {
    match tag {
        Some(t) => format!(
            "get it with `wcetctl recalibrate --interference {t} {kernel}` or Calibration1.RecalibrateWith([\"{kernel}\"], {{\"interference\": <[\"{t}\"]>}}), then wait for JobFinished"
        ),
        None => format!(
            "get it with `wcetctl recalibrate {kernel}` or Calibration1.Recalibrate([\"{kernel}\"]), then wait for JobFinished"
        ),
    }
}
