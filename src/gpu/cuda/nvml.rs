//! Telemetry and identity from NVML: clocks, temperature, power, throttle reasons, driver version
//! and clock policy. NVML is optional: without it every reading is `None` and the identity says
//! `unknown`, because a missing management library must not stop measurements.

use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::{Device, Nvml};

use crate::gpu::Telemetry;

pub struct Monitor {
    nvml: Option<Nvml>,
    uuid: String,
}

/// What NVML says about the device that the fingerprint needs.
pub struct Identity {
    pub name: Option<String>,
    pub driver: String,
    pub clock_policy: String,
    pub sm_clock_mhz: Option<u32>,
}

/// NVML's UUID spelling of the 16 bytes CUDA reports: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn format_uuid(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Reasons that mean the clock is below what the policy asks for. Idle and the operator's own
/// clock settings are the policy itself (recorded in the fingerprint), not throttling.
pub fn throttle_names(reasons: ThrottleReasons) -> Vec<String> {
    let policy = ThrottleReasons::GPU_IDLE | ThrottleReasons::APPLICATIONS_CLOCKS_SETTING;
    (reasons - policy)
        .iter_names()
        .map(|(name, _)| name.to_ascii_lowercase())
        .collect()
}

impl Monitor {
    pub fn new(uuid: &str) -> Self {
        Monitor {
            nvml: Nvml::init().ok(),
            uuid: uuid.to_string(),
        }
    }

    fn device(&self) -> Option<Device<'_>> {
        self.nvml.as_ref()?.device_by_uuid(self.uuid.as_str()).ok()
    }

    pub fn read(&self) -> Telemetry {
        let Some(dev) = self.device() else {
            return Telemetry::default();
        };
        Telemetry {
            sm_clock_mhz: dev.clock_info(Clock::SM).ok(),
            mem_clock_mhz: dev.clock_info(Clock::Memory).ok(),
            temperature_c: dev.temperature(TemperatureSensor::Gpu).ok(),
            power_mw: dev.power_usage().ok(),
            throttle_reasons: dev
                .current_throttle_reasons()
                .map(throttle_names)
                .unwrap_or_default(),
        }
    }

    pub fn identity(&self) -> Identity {
        let driver = self.nvml.as_ref().and_then(|n| n.sys_driver_version().ok());
        let Some(dev) = self.device() else {
            return Identity {
                name: None,
                driver: driver.unwrap_or_else(|| "unknown".into()),
                clock_policy: "unknown".into(),
                sm_clock_mhz: None,
            };
        };
        let app = dev.applications_clock(Clock::SM).ok();
        let default = dev.default_applications_clock(Clock::SM).ok();
        let clock_policy = match (app, default) {
            (Some(a), Some(d)) if a != d => format!("locked:{a}MHz"),
            (Some(_), Some(_)) => "default".into(),
            _ => "unknown".into(),
        };
        Identity {
            name: dev.name().ok(),
            driver: driver.unwrap_or_else(|| "unknown".into()),
            clock_policy,
            sm_clock_mhz: app.or_else(|| dev.max_clock_info(Clock::SM).ok()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_spelled_like_nvml() {
        let bytes: [u8; 16] = std::array::from_fn(|i| i as u8 * 17);
        assert_eq!(
            format_uuid(&bytes),
            "GPU-00112233-4455-6677-8899-aabbccddeeff"
        );
    }

    #[test]
    fn idle_and_operator_clocks_are_not_throttling() {
        assert!(throttle_names(
            ThrottleReasons::GPU_IDLE | ThrottleReasons::APPLICATIONS_CLOCKS_SETTING
        )
        .is_empty());
        let names =
            throttle_names(ThrottleReasons::SW_THERMAL_SLOWDOWN | ThrottleReasons::GPU_IDLE);
        assert_eq!(names, vec!["sw_thermal_slowdown".to_string()]);
    }

    #[test]
    fn no_nvml_means_empty_telemetry_not_an_error() {
        let monitor = Monitor {
            nvml: None,
            uuid: "GPU-none".into(),
        };
        assert_eq!(monitor.read(), Telemetry::default());
        assert_eq!(monitor.identity().clock_policy, "unknown");
    }
}
