//! A device description (design notes, "Devices and projection"): what a prediction needs to know
//! about a GPU it may never have run on. The fixed fields are the design's; the optional ones
//! extend it where a microbenchmark can say more, and say what is assumed when absent.

use serde::{Deserialize, Serialize};

/// L2 bandwidth assumed, as a multiple of DRAM bandwidth, when a description does not give it:
/// NVIDIA parts since Maxwell have an L2 two to four times faster than their DRAM; 3 is the middle.
pub const DEFAULT_L2_OVER_DRAM: f64 = 3.0;

/// Share of the SMs that saturates DRAM when a description does not say how much bandwidth one SM
/// can draw: streaming kernels reach the DRAM roof with about half the SMs of a large part.
pub const DEFAULT_SATURATING_SHARE: f64 = 0.5;

/// Launch overhead assumed when a description has none: a few microseconds on current drivers.
pub const DEFAULT_LAUNCH_OVERHEAD_US: f64 = 5.0;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceDescription {
    pub name: String,
    pub sms: u32,
    /// Compute capability times ten (70 for 7.0).
    pub cc: u32,
    pub max_threads_per_sm: u32,
    pub max_blocks_per_sm: u32,
    pub regs_per_sm: u32,
    pub shared_mem_per_sm: u32,
    pub l2_bytes: u64,
    pub warp_size: u32,
    /// Sustained DRAM bandwidth (a stream microbenchmark), GB/s.
    pub mem_bandwidth_gbps: f64,
    /// Sustained arithmetic throughput (a GEMM microbenchmark), GFLOP/s.
    pub compute_gflops: f64,
    /// Extension: sustained L2 bandwidth, GB/s [default: `DEFAULT_L2_OVER_DRAM` x DRAM].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l2_bandwidth_gbps: Option<f64>,
    /// Extension: bandwidth one SM can draw on its own, GB/s [default: DRAM saturates at
    /// `DEFAULT_SATURATING_SHARE` of the SMs].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_bandwidth_gbps: Option<f64>,
    /// Extension: time of an empty launch, back to back, in microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_overhead_us: Option<f64>,
}

/// (field, lowest, highest, what is accepted) for every numeric field of a description, in the
/// order of `DeviceDescription::numeric_fields`: generous, so that only a typo or a unit mistake
/// is refused (the largest parts have about 150 SMs, 8 TB/s and 2 PFLOP/s).
const RANGES: [(&str, f64, f64, &str); 13] = [
    ("sms", 1.0, 4096.0, "1 to 4096 SMs"),
    (
        "cc",
        10.0,
        200.0,
        "compute capability times ten, 10 to 200 (1.0 to 20.0)",
    ),
    ("max_threads_per_sm", 1.0, 65536.0, "1 to 65536 threads"),
    ("max_blocks_per_sm", 1.0, 1024.0, "1 to 1024 blocks"),
    ("regs_per_sm", 1.0, 16_777_216.0, "1 to 16777216 registers"),
    (
        "shared_mem_per_sm",
        1.0,
        67_108_864.0,
        "1 to 67108864 bytes (64 MiB)",
    ),
    (
        "l2_bytes",
        0.0,
        68_719_476_736.0,
        "0 to 68719476736 bytes (64 GiB)",
    ),
    ("warp_size", 1.0, 1024.0, "1 to 1024 threads"),
    (
        "mem_bandwidth_gbps",
        1.0,
        1e5,
        "1 to 100000 GB/s (1 GB/s to 100 TB/s)",
    ),
    (
        "compute_gflops",
        1.0,
        1e8,
        "1 to 100000000 GFLOP/s (1 GFLOP/s to 100 PFLOP/s)",
    ),
    (
        "l2_bandwidth_gbps",
        1.0,
        1e6,
        "1 to 1000000 GB/s (1 GB/s to 1 PB/s)",
    ),
    ("sm_bandwidth_gbps", 1.0, 1e5, "1 to 100000 GB/s"),
    (
        "launch_overhead_us",
        0.0,
        1e6,
        "0 to 1000000 microseconds (1 s)",
    ),
];

/// Why a description was refused: the file, the field and what is accepted.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("reading device description {path}: {error}; accepted: a committed description (rtx4070, titanx, h200, embedded) or a TOML file")]
    Read { path: String, error: std::io::Error },
    #[error("device description {path}: {detail}; accepted keys: name, sms, cc, max_threads_per_sm, max_blocks_per_sm, regs_per_sm, shared_mem_per_sm, l2_bytes, warp_size, mem_bandwidth_gbps, compute_gflops (required), l2_bandwidth_gbps, sm_bandwidth_gbps, launch_overhead_us (optional)")]
    Parse { path: String, detail: String },
    #[error("device description {path}: `{field}` is {value}; accepted: {accepted}")]
    Invalid {
        path: String,
        field: &'static str,
        value: String,
        accepted: &'static str,
    },
}

impl DeviceDescription {
    /// Parse and check a description; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, DeviceError> {
        let d: DeviceDescription = toml::from_str(text).map_err(|e| DeviceError::Parse {
            path: origin.to_string(),
            detail: crate::manifest::describe_toml(&e, text),
        })?;
        d.check(origin)?;
        Ok(d)
    }

    pub fn load(path: &std::path::Path) -> Result<Self, DeviceError> {
        let origin = path.display().to_string();
        let text = crate::manifest::read_text_limited(path, 1 << 20).map_err(|error| {
            DeviceError::Read {
                path: origin.clone(),
                error,
            }
        })?;
        Self::parse(&text, &origin)
    }

    /// Refuse what no GPU has. A value far outside these (generous) ranges is a typo or a unit
    /// mistake, and made predictions of nonsense: 1e-300 GB/s saturated every time at u64::MAX.
    pub(crate) fn check(&self, origin: &str) -> Result<(), DeviceError> {
        let bad = |field, value: String, accepted| DeviceError::Invalid {
            path: origin.to_string(),
            field,
            value,
            accepted,
        };
        if self.name.trim().is_empty() {
            return Err(bad("name", "empty".into(), "a non-empty string"));
        }
        for ((field, v), (name, lo, hi, accepted)) in self.numeric_fields().into_iter().zip(RANGES)
        {
            debug_assert_eq!(field, name, "RANGES and numeric_fields are in one order");
            if let Some(v) = v.filter(|v| !(v.is_finite() && (lo..=hi).contains(v))) {
                // Scientific where plain digits would run to hundreds (1e-300).
                let shown = if v != 0.0 && !(1e-3..1e9).contains(&v.abs()) {
                    format!("{v:e}")
                } else {
                    v.to_string()
                };
                return Err(bad(field, shown, accepted));
            }
        }
        Ok(())
    }

    /// Every numeric field, in the order of [`RANGES`] (`None`: an optional one left out).
    fn numeric_fields(&self) -> [(&'static str, Option<f64>); 13] {
        let n = |v: u32| Some(f64::from(v));
        [
            ("sms", n(self.sms)),
            ("cc", n(self.cc)),
            ("max_threads_per_sm", n(self.max_threads_per_sm)),
            ("max_blocks_per_sm", n(self.max_blocks_per_sm)),
            ("regs_per_sm", n(self.regs_per_sm)),
            ("shared_mem_per_sm", n(self.shared_mem_per_sm)),
            ("l2_bytes", Some(self.l2_bytes as f64)),
            ("warp_size", n(self.warp_size)),
            ("mem_bandwidth_gbps", Some(self.mem_bandwidth_gbps)),
            ("compute_gflops", Some(self.compute_gflops)),
            ("l2_bandwidth_gbps", self.l2_bandwidth_gbps),
            ("sm_bandwidth_gbps", self.sm_bandwidth_gbps),
            ("launch_overhead_us", self.launch_overhead_us),
        ]
    }

    pub fn l2_gbps(&self) -> f64 {
        self.l2_bandwidth_gbps
            .unwrap_or(DEFAULT_L2_OVER_DRAM * self.mem_bandwidth_gbps)
    }

    /// Bandwidth of the level a working set of `bytes` is served from across repeated launches:
    /// L2 when it fits, DRAM otherwise.
    pub fn level_gbps(&self, working_set: f64) -> f64 {
        if self.fits_l2(working_set) {
            self.l2_gbps()
        } else {
            self.mem_bandwidth_gbps
        }
    }

    pub fn fits_l2(&self, working_set: f64) -> bool {
        working_set <= self.l2_bytes as f64
    }

    pub fn sm_gbps(&self) -> f64 {
        self.sm_bandwidth_gbps
            .unwrap_or(self.mem_bandwidth_gbps / (DEFAULT_SATURATING_SHARE * f64::from(self.sms)))
    }

    pub fn launch_overhead_ms(&self) -> Option<f64> {
        self.launch_overhead_us.map(|us| us / 1000.0)
    }

    /// Thread blocks of one launch resident on one SM at once, from the per-SM limits on
    /// threads, blocks, registers and shared memory; at least 1 (a block that fits nowhere
    /// would not launch at all, and its time is then not ours to predict).
    pub fn blocks_per_sm(
        &self,
        threads_per_block: u32,
        regs_per_thread: u32,
        shared_per_block: u32,
    ) -> u32 {
        let warp = self.warp_size.max(1);
        let warps = threads_per_block.max(1).div_ceil(warp);
        let by_threads = self.max_threads_per_sm / (warps * warp);
        let by_regs = if regs_per_thread == 0 {
            u32::MAX
        } else {
            self.regs_per_sm / (regs_per_thread * warps * warp).max(1)
        };
        let by_shared = self
            .shared_mem_per_sm
            .checked_div(shared_per_block)
            .unwrap_or(u32::MAX);
        self.max_blocks_per_sm
            .min(by_threads)
            .min(by_regs)
            .min(by_shared)
            .max(1)
    }
}

/// The descriptions committed under `calibration/devices/`, by file stem.
pub const BUILTIN: [(&str, &str); 4] = [
    (
        "rtx4070",
        include_str!("../../../calibration/devices/rtx4070.toml"),
    ),
    (
        "titanx",
        include_str!("../../../calibration/devices/titanx.toml"),
    ),
    (
        "h200",
        include_str!("../../../calibration/devices/h200.toml"),
    ),
    (
        "embedded",
        include_str!("../../../calibration/devices/embedded.toml"),
    ),
];

/// A committed description by stem (`h200`), or a TOML file.
pub fn load(name_or_path: &str) -> Result<DeviceDescription, DeviceError> {
    match BUILTIN.iter().find(|(stem, _)| *stem == name_or_path) {
        Some((stem, text)) => DeviceDescription::parse(text, &format!("built-in `{stem}`")),
        None => DeviceDescription::load(std::path::Path::new(name_or_path)),
    }
}

/// The committed description whose name occurs in `device_name` (case-insensitive), if any.
pub fn builtin_matching(device_name: &str) -> Option<DeviceDescription> {
    let lower = device_name.to_lowercase();
    BUILTIN
        .iter()
        .filter_map(|(stem, text)| DeviceDescription::parse(text, stem).ok())
        .find(|d| lower.contains(&d.name.to_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_parses() {
        for (stem, text) in BUILTIN {
            DeviceDescription::parse(text, stem).unwrap();
        }
    }

    #[test]
    fn errors_name_the_field_and_what_is_accepted() {
        let (_, text) = BUILTIN[0];
        let e = DeviceDescription::parse(&text.replace("sms = 46", "sms = 0"), "x.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`sms` is 0") && e.contains("accepted: 1 to 4096 SMs"),
            "{e}"
        );
        let e = DeviceDescription::parse(&format!("{text}\nbogus = 1\n"), "x.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("bogus") && e.contains("accepted keys"), "{e}");
        let e = DeviceDescription::parse("name = \"a\"", "x.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing field"), "{e}");
    }

    /// A syntax error names its line, as `wcetctl kernels check` does for manifests (it once
    /// said only "unclosed array, expected `]`").
    #[test]
    fn syntax_errors_name_the_line() {
        let text = "name = \"x\"\nsms = 4\n\ncc = [89\n";
        let e = DeviceDescription::parse(text, "x.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("device description x.toml: line 4: ") && e.contains("`]`"),
            "{e}"
        );
    }

    /// Values no GPU has are refused with the field, the value and the range accepted: 1e-300
    /// GB/s once predicted u64::MAX ns at every size. The committed descriptions are in range.
    #[test]
    fn implausible_values_are_refused_with_the_range() {
        let (_, text) = BUILTIN[0];
        let cases = [
            (
                "mem_bandwidth_gbps = 446.98",
                "mem_bandwidth_gbps = 1e-300",
                "`mem_bandwidth_gbps` is 1e-300",
                "1 to 100000 GB/s",
            ),
            (
                "mem_bandwidth_gbps = 446.98",
                "mem_bandwidth_gbps = 1e9",
                "`mem_bandwidth_gbps` is 1e9",
                "100 TB/s",
            ),
            (
                "compute_gflops = 17154.8",
                "compute_gflops = 0.5",
                "`compute_gflops` is 0.5",
                "1 to 100000000 GFLOP/s",
            ),
            (
                "sms = 46",
                "sms = 100000",
                "`sms` is 100000",
                "1 to 4096 SMs",
            ),
            ("cc = 89", "cc = 0", "`cc` is 0", "10 to 200"),
            (
                "warp_size = 32",
                "warp_size = 4096",
                "`warp_size` is 4096",
                "1 to 1024",
            ),
        ];
        for (from, to, said, accepted) in cases {
            assert!(text.contains(from), "{from}");
            let e = DeviceDescription::parse(&text.replace(from, to), "x.toml")
                .unwrap_err()
                .to_string();
            assert!(e.contains(said) && e.contains(accepted), "{to}: {e}");
        }
        let e = DeviceDescription::parse(&format!("{text}launch_overhead_us = 1e12\n"), "x.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`launch_overhead_us`") && e.contains("0 to 1000000"),
            "{e}"
        );
    }

    #[test]
    fn occupancy_takes_the_tightest_per_sm_limit() {
        let d = load("rtx4070").unwrap();
        // 256 threads: 1536 / 256 = 6 by threads.
        assert_eq!(d.blocks_per_sm(256, 12, 0), 6);
        // 206 registers x 1024 threads exceed 65536: still 1, never 0.
        assert_eq!(d.blocks_per_sm(1024, 206, 4096), 1);
        // 40 KiB of shared memory per block: 2 in 100 KiB.
        assert_eq!(d.blocks_per_sm(128, 16, 40 * 1024), 2);
    }

    #[test]
    fn a_device_is_matched_by_name() {
        let d = builtin_matching("Simulated NVIDIA H200 (132 SMs)").unwrap();
        assert_eq!(d.sms, 132);
        assert!(builtin_matching("a GPU nobody described").is_none());
    }
}
