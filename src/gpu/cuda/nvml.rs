//! Telemetry and identity from NVML: clocks, temperature, power and throttling around and during a
//! batch, and the driver version and clock policy the fingerprint needs.
//!
//! Throttling is read two ways, neither of them at idle: the driver's cumulative violation
//! counters (`nvmlDeviceGetViolationStatus`: nanoseconds spent limited by power, thermal, board or
//! reliability limits) are differenced across the batch, and a sampler thread reads the SM clock
//! and the active clock-event reasons every few milliseconds while the launches run.
//!
//! NVML is optional: without it every reading is `None`, the driver version comes from
//! `/proc/driver/nvidia/version`, and the clock policy is `unknown` (nothing can read a clock),
//! so a host that gains or loses NVML finds its calibrations of another configuration and serves
//! them stale until recalibrated: the cautious side of a change nobody can see.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::enum_wrappers::device::{Clock, PerformancePolicy, TemperatureSensor};
use nvml_wrapper::{Device, Nvml};

use crate::gpu::Telemetry;

/// How often the sampler reads NVML while a batch runs.
const SAMPLE_EVERY: Duration = Duration::from_millis(5);

/// The limits whose cumulative violation time counts as throttling.
const VIOLATIONS: [(PerformancePolicy, &str); 4] = [
    (PerformancePolicy::Power, "power_limit"),
    (PerformancePolicy::Thermal, "thermal_limit"),
    (PerformancePolicy::BoardLimit, "board_limit"),
    (PerformancePolicy::Reliability, "reliability_limit"),
];

pub struct Monitor {
    nvml: Option<Nvml>,
    uuid: String,
}

/// What NVML (or the kernel module) says about the device that the fingerprint needs.
pub struct Identity {
    pub name: Option<String>,
    pub driver: String,
    /// Application clocks differ from the defaults: `applications:<MHz>`; otherwise `None`, and
    /// the clock probe decides between `default` and `locked:<MHz>`.
    pub applications_clock: Option<String>,
    /// The highest SM clock the device may run at (MHz).
    pub max_sm_clock_mhz: Option<u32>,
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

/// Reasons that mean the clock is below what the policy asks for. Idle, the operator's own clock
/// settings (recorded in the fingerprint), sync boost (several GPUs held to one clock on purpose)
/// and the display clock setting are not throttling.
pub fn throttle_names(reasons: ThrottleReasons) -> Vec<String> {
    let policy = ThrottleReasons::GPU_IDLE
        | ThrottleReasons::APPLICATIONS_CLOCKS_SETTING
        | ThrottleReasons::SYNC_BOOST
        | ThrottleReasons::DISPLAY_CLOCK_SETTING;
    (reasons - policy)
        .iter_names()
        .map(|(name, _)| name.to_ascii_lowercase())
        .collect()
}

/// The clock policy from what a short full-device load showed: a clock under load below the
/// device's maximum with no throttle reason active means someone locked or capped the clocks
/// (`nvidia-smi -lgc`, which leaves application clocks alone).
pub fn clock_policy(
    applications: Option<&str>,
    loaded_mhz: Option<u32>,
    max_mhz: Option<u32>,
    throttled: bool,
) -> String {
    if let Some(app) = applications {
        return app.to_string();
    }
    match (loaded_mhz, max_mhz) {
        // One clock step (15 MHz on Hopper) of slack for rounding in the reading.
        (Some(c), Some(m)) if c + 15 < m && !throttled => format!("locked:{c}MHz"),
        (Some(_), Some(_)) => "default".into(),
        _ => "unknown".into(),
    }
}

/// The driver version from the kernel module, for when NVML is missing:
/// `NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  ...`.
pub fn driver_from_proc(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.contains("Kernel Module"))?;
    let after = line.split("Kernel Module").nth(1)?;
    after
        .split_whitespace()
        .find(|v| v.contains('.') && v.chars().all(|c| c.is_ascii_digit() || c == '.'))
        .map(str::to_string)
}

/// The UUID of every GPU NVML enumerates: every card of the host, whatever
/// `CUDA_VISIBLE_DEVICES` hides from CUDA (NVML does not read it). MIG instances are not
/// listed, only their parent cards. Empty where NVML does not load.
pub fn host_uuids() -> Vec<String> {
    let Ok(nvml) = Nvml::init() else {
        return Vec::new();
    };
    let count = nvml.device_count().unwrap_or(0);
    (0..count)
        .filter_map(|i| nvml.device_by_index(i).ok()?.uuid().ok())
        .collect()
}

impl Monitor {
    pub fn new(uuid: &str) -> Self {
        Monitor {
            nvml: Nvml::init().ok(),
            uuid: uuid.to_string(),
        }
    }

    /// The GPU whose clocks, power and throttling the partitions run under. On a MIG instance
    /// CUDA reports the instance's UUID, which NVML spells `MIG-…`; its clocks are the parent
    /// GPU's.
    fn device(&self) -> Option<Device<'_>> {
        let nvml = self.nvml.as_ref()?;
        if let Ok(dev) = nvml.device_by_uuid(self.uuid.as_str()) {
            return Some(dev);
        }
        let mig = self.uuid.replacen("GPU-", "MIG-", 1);
        nvml.device_by_uuid(mig.as_str())
            .ok()?
            .mig_parent_device()
            .ok()
    }

    pub fn read(&self) -> Telemetry {
        let Some(dev) = self.device() else {
            return Telemetry::default();
        };
        let reasons = dev.current_throttle_reasons().ok();
        let throttle_reasons = reasons.map(throttle_names).unwrap_or_default();
        Telemetry {
            sm_clock_mhz: dev.clock_info(Clock::SM).ok(),
            mem_clock_mhz: dev.clock_info(Clock::Memory).ok(),
            temperature_c: dev.temperature(TemperatureSensor::Gpu).ok(),
            power_mw: dev.power_usage().ok(),
            idle: throttle_reasons.is_empty()
                && reasons.is_some_and(|r| r.contains(ThrottleReasons::GPU_IDLE)),
            throttle_reasons,
            throttle_ns: 0,
        }
    }

    /// Cumulative violation time per limit, in nanoseconds (0 where NVML cannot say).
    fn violations(&self) -> [u64; VIOLATIONS.len()] {
        let Some(dev) = self.device() else {
            return [0; VIOLATIONS.len()];
        };
        VIOLATIONS.map(|(policy, _)| {
            dev.violation_status(policy)
                .map(|v| v.violation_time)
                .unwrap_or(0)
        })
    }

    /// Run `work` while a sampler thread reads the device; returns its result and the conditions
    /// while it ran: the lowest SM clock, the highest temperature and power, every throttle reason
    /// seen, and the violation time the driver counted across it.
    pub fn during<T>(&self, work: impl FnOnce() -> T) -> (T, Telemetry) {
        if self.device().is_none() {
            return (work(), Telemetry::default());
        }
        let before = self.violations();
        let (result, readings) = sampled_while(|| self.read(), SAMPLE_EVERY, work);
        let after = self.violations();
        (result, summarise(&readings, &before, &after))
    }

    pub fn identity(&self) -> Identity {
        let driver = self
            .nvml
            .as_ref()
            .and_then(|n| n.sys_driver_version().ok())
            .or_else(|| {
                let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
                driver_from_proc(&text)
            })
            .unwrap_or_else(|| "unknown".into());
        let Some(dev) = self.device() else {
            return Identity {
                name: None,
                driver,
                applications_clock: None,
                max_sm_clock_mhz: None,
            };
        };
        let app = dev.applications_clock(Clock::SM).ok();
        let default = dev.default_applications_clock(Clock::SM).ok();
        Identity {
            name: dev.name().ok(),
            driver,
            applications_clock: match (app, default) {
                (Some(a), Some(d)) if a != d => Some(format!("applications:{a}MHz")),
                _ => None,
            },
            max_sm_clock_mhz: dev.max_clock_info(Clock::SM).ok(),
        }
    }
}

/// Run `work` while another thread takes `sample()` every `every`; its result and the samples.
/// No sample after the work: the clock falls towards idle as soon as the GPU is. The sampler is
/// stopped however `work` ends: on a panic too, which then reaches the caller (the GPU worker
/// catches it) instead of the scope waiting for the sampler for ever.
fn sampled_while<T, R: Send>(
    sample: impl Fn() -> R + Sync,
    every: Duration,
    work: impl FnOnce() -> T,
) -> (T, Vec<R>) {
    struct StopOnDrop<'a>(&'a AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let stop = AtomicBool::new(false);
    let seen = Mutex::new(Vec::new());
    let result = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let reading = sample();
                seen.lock().unwrap_or_else(|e| e.into_inner()).push(reading);
                std::thread::sleep(every);
            }
        });
        let _stop = StopOnDrop(&stop);
        work()
    });
    (result, seen.into_inner().unwrap_or_else(|e| e.into_inner()))
}

/// Readings taken while a batch ran, and the violation counters around it, as one [`Telemetry`].
/// The clock is the lowest of the readings that were not idle (of all of them when every one
/// was): a batch's first milliseconds, or the compile before a probe's load, find the GPU idle at
/// a clock no launch runs at.
fn summarise(readings: &[Telemetry], before: &[u64], after: &[u64]) -> Telemetry {
    let mut reasons: Vec<String> = readings
        .iter()
        .flat_map(|r| r.throttle_reasons.iter().cloned())
        .collect();
    let mut throttle_ns = 0;
    for (i, (_, name)) in VIOLATIONS.iter().enumerate() {
        let delta = after[i].saturating_sub(before[i]);
        if delta > 0 {
            reasons.push((*name).to_string());
            throttle_ns += delta;
        }
    }
    reasons.sort();
    reasons.dedup();
    let busy: Vec<&Telemetry> = readings.iter().filter(|r| !r.idle).collect();
    let clocked: Vec<&Telemetry> = if busy.is_empty() {
        readings.iter().collect()
    } else {
        busy
    };
    Telemetry {
        sm_clock_mhz: clocked.iter().filter_map(|r| r.sm_clock_mhz).min(),
        mem_clock_mhz: clocked.iter().filter_map(|r| r.mem_clock_mhz).min(),
        temperature_c: readings.iter().filter_map(|r| r.temperature_c).max(),
        power_mw: readings.iter().filter_map(|r| r.power_mw).max(),
        throttle_reasons: reasons,
        throttle_ns,
        idle: !clocked.is_empty() && clocked.iter().all(|r| r.idle),
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
    fn idle_operator_clocks_sync_boost_and_display_are_not_throttling() {
        assert!(throttle_names(
            ThrottleReasons::GPU_IDLE
                | ThrottleReasons::APPLICATIONS_CLOCKS_SETTING
                | ThrottleReasons::SYNC_BOOST
                | ThrottleReasons::DISPLAY_CLOCK_SETTING
        )
        .is_empty());
        let names =
            throttle_names(ThrottleReasons::SW_THERMAL_SLOWDOWN | ThrottleReasons::GPU_IDLE);
        assert_eq!(names, vec!["sw_thermal_slowdown".to_string()]);
    }

    #[test]
    fn locked_clocks_are_told_from_default_ones_by_the_clock_under_load() {
        assert_eq!(clock_policy(None, Some(1980), Some(1980), false), "default");
        assert_eq!(
            clock_policy(None, Some(1755), Some(1980), false),
            "locked:1755MHz"
        );
        assert_eq!(
            clock_policy(None, Some(1755), Some(1980), true),
            "default",
            "a power-capped clock is throttling, not a policy"
        );
        assert_eq!(
            clock_policy(Some("applications:1410MHz"), Some(1410), Some(1980), false),
            "applications:1410MHz"
        );
        assert_eq!(clock_policy(None, None, Some(1980), false), "unknown");
    }

    #[test]
    fn the_driver_version_is_read_from_the_kernel_module_without_nvml() {
        let text = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U22-I3-AF03-09-1)  Thu Oct  2 2025\nGCC version:  gcc version 12.3.0\n";
        assert_eq!(driver_from_proc(text), Some("580.159.04".into()));
        let closed = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024";
        assert_eq!(driver_from_proc(closed), Some("550.54.14".into()));
        assert_eq!(driver_from_proc("nothing here"), None);
    }

    #[test]
    fn a_panicking_batch_stops_the_sampler_and_reaches_the_caller() {
        let caught = std::panic::catch_unwind(|| {
            sampled_while(|| 1u32, Duration::from_millis(1), || panic!("launch"))
        });
        assert!(caught.is_err(), "the panic reaches the caller, not a hang");
        let (result, samples) = sampled_while(|| 1u32, Duration::from_millis(1), || 7);
        assert_eq!(result, 7);
        assert!(samples.len() <= 1_000, "{}", samples.len());
    }

    #[test]
    fn idle_readings_do_not_set_a_batch_clock() {
        let reading = |mhz, idle| Telemetry {
            sm_clock_mhz: Some(mhz),
            idle,
            ..Telemetry::default()
        };
        let batch = summarise(
            &[reading(345, true), reading(1980, false)],
            &[0; 4],
            &[0; 4],
        );
        assert_eq!(batch.sm_clock_mhz, Some(1980));
        assert!(!batch.idle);
        let idle = summarise(&[reading(345, true), reading(600, true)], &[0; 4], &[0; 4]);
        assert_eq!(
            idle.sm_clock_mhz,
            Some(345),
            "with nothing else, the lowest"
        );
        assert!(idle.idle);
    }

    #[test]
    fn violation_time_across_a_batch_is_throttling_and_named() {
        let readings = vec![
            Telemetry {
                sm_clock_mhz: Some(1980),
                temperature_c: Some(40),
                ..Default::default()
            },
            Telemetry {
                sm_clock_mhz: Some(1890),
                temperature_c: Some(44),
                ..Default::default()
            },
        ];
        let t = summarise(&readings, &[10, 0, 0, 0], &[510, 0, 0, 0]);
        assert_eq!(t.sm_clock_mhz, Some(1890));
        assert_eq!(t.temperature_c, Some(44));
        assert_eq!(t.throttle_reasons, vec!["power_limit".to_string()]);
        assert_eq!(t.throttle_ns, 500);
        assert!(t.throttled());
        let quiet = summarise(&readings, &[10, 0, 0, 0], &[10, 0, 0, 0]);
        assert!(!quiet.throttled());
    }

    #[test]
    fn no_nvml_means_empty_telemetry_not_an_error() {
        let monitor = Monitor {
            nvml: None,
            uuid: "GPU-none".into(),
        };
        assert_eq!(monitor.read(), Telemetry::default());
        let (value, during) = monitor.during(|| 7);
        assert_eq!(value, 7);
        assert_eq!(during, Telemetry::default());
        assert_eq!(monitor.identity().applications_clock, None);
    }
}
