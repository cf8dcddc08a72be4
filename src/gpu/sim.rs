//! The simulated GPU: a physically motivated model of how long a kernel takes on m SMs, so that
//! everything above the GPU layer runs end to end, deterministically, on a machine without a GPU.
//!
//! One launch on m SMs takes `launch + max(compute, memory) + contention`, where compute is
//! `wave * ceil(blocks / (m * blocks_per_sm))`, memory is `bytes / min(m * sm_bw, roof_bw)` and
//! contention is `per_sm * max(0, m - onset)`, multiplied by per-launch jitter: a truncated
//! half-normal body plus, rarely, a Pareto delay (the heavy tail, capped or not), plus an optional
//! additive half-normal delay. Some batches run through a clock-throttling episode. With a stressor
//! on the other SMs, the memory time grows with the share of the device the stressor holds.
//!
//! The law is the simulator's own; real parts do things it does not. So a kernel may instead give
//! its noise-free curve as a table (`curve_ns`, any shape, e.g. a curve measured elsewhere), and
//! named [`Effects`] bend the law the way real parts do: an L2-thrashing hump, partitions that
//! split a GPC unevenly, a wrong occupancy hint, saturating atomics, wave steps of uneven cost.
//! `calibration/profiles/foreign/` holds kernels built from them.
//!
//! Profiles live in `calibration/profiles/*.toml` and are compiled in; `--sim-profile FILE` loads
//! another. Every batch draws from a ChaCha stream keyed by (seed, kernel, size, batch number), so a
//! run is reproducible from its seed and two campaigns with different seeds are independent.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

use super::{
    Backend, Batch, DeviceInfo, Fingerprint, Gpu, GpuError, Interference, PartitionSize,
    RunRequest, Telemetry,
};
use crate::kernels::{Geometry, KernelSpec};
use crate::manifest::Manifest;

/// A simulated device: its size, partition rule, clocks and the physics of each kernel.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceProfile {
    pub name: String,
    pub total_sms: u32,
    pub sms_per_tpc: u32,
    /// Partition sizes are the multiples of this up to the device, plus the whole device.
    pub partition_step_sms: u32,
    pub sm_clock_mhz: u32,
    /// Device memory in bytes: a manifest kernel whose buffers do not fit is refused when it is
    /// run, as the CUDA backend refuses it (`cuMemGetInfo`), so that the simulator never times a
    /// kernel no device of this kind could launch. Default: [`DEFAULT_MEMORY_BYTES`].
    #[serde(default = "default_memory_bytes")]
    pub memory_bytes: u64,
    pub throttle: ThrottleProfile,
    pub interference: InterferenceProfile,
    /// Rare delays of fixed length that hit any launch of any kernel (none unless set).
    #[serde(default)]
    pub delays: DelayProfile,
    pub kernels: BTreeMap<String, KernelPhysics>,
}

/// Device memory of a profile that does not say: an H100's 80 GB.
pub const DEFAULT_MEMORY_BYTES: u64 = 80_000_000_000;

fn default_memory_bytes() -> u64 {
    DEFAULT_MEMORY_BYTES
}

/// A device's rare delays: with `probability` per launch, a launch of any kernel (and of the
/// delay probe) takes between `min_ns` and `max_ns` longer (uniform). On an H100 such delays of
/// 2-6.5 µs hit about 1.6e-4 of launches (`docs/hardware-validation.md`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelayProfile {
    pub probability: f64,
    pub min_ns: f64,
    pub max_ns: f64,
}

impl DelayProfile {
    fn draw(&self, rng: &mut ChaCha8Rng) -> f64 {
        if self.probability > 0.0 && rng.random::<f64>() < self.probability {
            rng.random_range(self.min_ns..=self.max_ns.max(self.min_ns))
        } else {
            0.0
        }
    }
}

/// The delay probe's launch: a fixed amount of work this long on the whole device.
const PROBE_NS: f64 = 20_000.0;
/// Launches of the delay probe per chance of a throttling episode: the batch length the
/// campaigns use by default, so the probe throttles as often per launch as a kernel does.
const PROBE_STRETCH: u32 = 50;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThrottleProfile {
    /// Chance that a batch contains a throttling episode.
    pub batch_probability: f64,
    /// Clock during the episode, as a fraction of the nominal clock.
    pub clock_factor: f64,
    /// Launches the episode lasts.
    pub run_length: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InterferenceProfile {
    pub memory_slowdown: f64,
}

/// How one kernel behaves: the physical fields of the time law above, or a tabulated curve
/// (`curve_ns`) that replaces them, plus named effects that real parts show and the law does not.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelPhysics {
    #[serde(default)]
    pub blocks: u32,
    /// Resident blocks per SM as the occupancy calculator reports it (the hint the model gets).
    #[serde(default)]
    pub blocks_per_sm: u32,
    #[serde(default)]
    pub launch_ns: f64,
    #[serde(default)]
    pub wave_ns: f64,
    #[serde(default)]
    pub bytes: f64,
    #[serde(default = "one")]
    pub sm_bytes_per_ns: f64,
    #[serde(default = "one")]
    pub roof_bytes_per_ns: f64,
    #[serde(default)]
    pub contention_ns_per_sm: f64,
    #[serde(default)]
    pub contention_onset_sms: u32,
    /// The noise-free time at every realisable size, as `(sms, ns)` pairs: any shape at all. When
    /// given, the physical fields above are not used for the time (the same key as the `[sim]`
    /// table of a kernel manifest in the design notes).
    #[serde(default)]
    pub curve_ns: Option<Vec<(u32, f64)>>,
    /// Share of a tabulated curve that a bandwidth stressor on the other SMs slows down.
    #[serde(default = "half")]
    pub memory_fraction: f64,
    #[serde(default)]
    pub effects: Effects,
    #[serde(default)]
    pub jitter: Jitter,
}

fn one() -> f64 {
    1.0
}

fn half() -> f64 {
    0.5
}

/// Effects real GPUs show that the time law does not: each is off unless set.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Effects {
    /// The working set stops fitting in L2 over a range of sizes: a Gaussian hump in time.
    pub l2_hump: Option<L2Hump>,
    /// Partitions that split a GPC unevenly run slower.
    pub gpc_imbalance: Option<GpcImbalance>,
    /// Blocks per SM that really fit, when the occupancy hint (`blocks_per_sm`) is wrong.
    pub actual_blocks_per_sm: Option<u32>,
    /// Atomics on shared counters: time grows with the SMs issuing them until the memory system
    /// saturates.
    pub atomics: Option<Atomics>,
    /// Cost of a partial last wave as a share of a full one, before its filled share is added:
    /// the wave `k` of `n` costs `wave_ns * (c + (1 - c) * fill)` when only `fill` of its slots
    /// hold blocks (1, the default, is the even staircase of the time law).
    pub partial_wave_cost: Option<f64>,
    /// A bug in the kernel that ends in a sticky CUDA error (a device-side `assert`, an illegal
    /// address): its first launch loses the device, which fails every later call of the process,
    /// as on a real GPU. The text says which error (it goes into the message).
    pub device_fault: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct L2Hump {
    pub center_sms: f64,
    pub width_sms: f64,
    /// Relative slowdown at the centre.
    pub height: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpcImbalance {
    pub sms_per_gpc: u32,
    /// Relative slowdown of a partition that is not a whole number of GPCs.
    pub penalty: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Atomics {
    pub ns_per_sm: f64,
    pub saturate_sms: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Jitter {
    /// Relative standard deviation of the body (half-normal, truncated at 4 sigma).
    pub body_sigma: f64,
    /// Chance that a launch is hit by a tail delay.
    pub tail_probability: f64,
    /// Pareto shape of the delay; below 2 the variance is infinite.
    pub tail_alpha: f64,
    /// Pareto scale of the delay, relative to the launch time.
    pub tail_scale: f64,
    /// Longest possible delay, relative to the launch time (a preemption or an interrupt ends);
    /// `inf` for a tail with no cap.
    pub tail_cap: f64,
    /// Standard deviation, in ns, of a half-normal delay that does not scale with the launch
    /// (interrupts, host-side launch overhead), truncated at 4 sigma.
    #[serde(default)]
    pub additive_ns: f64,
}

impl Default for Jitter {
    fn default() -> Self {
        Jitter {
            body_sigma: 0.012,
            tail_probability: 0.001,
            tail_alpha: 3.0,
            tail_scale: 0.01,
            tail_cap: 0.06,
            additive_ns: 0.0,
        }
    }
}

/// Check a tabulated kernel's `curve_ns` against the device's realisable `sizes`: one time for
/// each of them and for no other size, each a plausible number of nanoseconds.
fn check_curve(name: &str, curve: &[(u32, f64)], sizes: &[PartitionSize]) -> anyhow::Result<()> {
    let missing: Vec<u32> = sizes
        .iter()
        .copied()
        .filter(|m| !curve.iter().any(|(c, _)| c == m))
        .collect();
    anyhow::ensure!(
        missing.is_empty(),
        "kernel {name}: curve_ns has no time for {missing:?}; accepted: [sms, ns] pairs covering every realisable size {sizes:?}"
    );
    let mut seen = std::collections::BTreeSet::new();
    if let Some((m, _)) = curve.iter().find(|(m, _)| !seen.insert(*m)) {
        anyhow::bail!(
            "kernel {name}: curve_ns gives {m} SMs more than once; accepted: one [sms, ns] pair per realisable size {sizes:?}"
        );
    }
    if let Some((m, _)) = curve.iter().find(|(m, _)| !sizes.contains(m)) {
        anyhow::bail!(
            "kernel {name}: curve_ns gives {m} SMs, which this device cannot realise; accepted: the realisable sizes {sizes:?}"
        );
    }
    // Below 1 ns is a unit mistake (seconds or milliseconds given as nanoseconds),
    // and the simulator would time such launches at 0 ns.
    // Above an hour likewise (the limit `Report` keeps): 1e30 was served as a bound
    // of 2^64 - 1 ns.
    let hour = crate::samples::MAX_TIME_NS as f64;
    if let Some((m, t)) = curve
        .iter()
        .find(|(_, t)| !(t.is_finite() && (1.0..=hour).contains(t)))
    {
        anyhow::bail!(
            "kernel {name}: curve_ns gives {t} at {m} SMs; accepted: times in nanoseconds, from 1 to one hour (3.6e12; a launch of 50 us is 50000)"
        );
    }
    anyhow::ensure!(
        !curve.is_empty(),
        "kernel {name}: curve_ns is empty; accepted: one [sms, ns] pair per realisable size"
    );
    Ok(())
}

impl KernelPhysics {
    /// The launch geometry the model is told about (with the occupancy hint, right or wrong);
    /// `None` for a tabulated kernel without one.
    pub fn geometry(&self) -> Option<Geometry> {
        (self.blocks > 0 && self.blocks_per_sm > 0).then_some(Geometry {
            blocks: self.blocks,
            blocks_per_sm: self.blocks_per_sm,
        })
    }

    /// Check the fields a profile or a manifest's `[sim]` table gave for kernel `name`.
    pub fn check(&self, name: &str, sizes: &[PartitionSize]) -> anyhow::Result<()> {
        match &self.curve_ns {
            Some(curve) => check_curve(name, curve, sizes)?,
            None => self.check_analytic(name)?,
        }
        anyhow::ensure!(
            self.effects.actual_blocks_per_sm != Some(0)
                && self
                    .effects
                    .gpc_imbalance
                    .as_ref()
                    .is_none_or(|g| g.sms_per_gpc > 0)
                && self
                    .effects
                    .l2_hump
                    .as_ref()
                    .is_none_or(|h| h.width_sms > 0.0),
            "kernel {name}: effects need actual_blocks_per_sm, sms_per_gpc and width_sms above 0"
        );
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.memory_fraction),
            "kernel {name}: memory_fraction is {}; accepted: a share from 0 to 1",
            self.memory_fraction
        );
        let j = &self.jitter;
        anyhow::ensure!(
            (0.0..=1.0).contains(&j.tail_probability) && j.tail_alpha > 0.0,
            "kernel {name}: jitter.tail_probability must be in [0, 1] and tail_alpha positive"
        );
        self.check_times(name, sizes)
    }

    /// The noise-free time alone at each of `sizes`, or, without a device, at every size up to
    /// 256 SMs, from 1 ns to the hour `Report` accepts, as `curve_ns` is checked. Unchecked, `[sim]` fields that give no time
    /// (only `blocks`) timed every launch at 0 ns and served a bound of 1 ns, and `launch_ns =
    /// 1e300` one of 2^64 - 1 ns, both as measured (a black-box hunt found them).
    fn check_times(&self, name: &str, sizes: &[PartitionSize]) -> anyhow::Result<()> {
        let hour = crate::samples::MAX_TIME_NS as f64;
        let every: Vec<PartitionSize> = (1..=256).collect();
        let sizes = if sizes.is_empty() { &every } else { sizes };
        for &m in sizes {
            let t = self.ideal_ns(m, 0.0);
            let shown = match t == 0.0 || (1e-3..1e9).contains(&t.abs()) {
                true => format!("{t}"),
                false => format!("{t:e}"),
            };
            anyhow::ensure!(
                t.is_finite() && (1.0..=hour).contains(&t),
                "kernel {name}: its [sim] fields give a launch of {shown} ns at {m} SMs; accepted: launch times from 1 ns to one hour (3.6e12 ns): give launch_ns, wave_ns or bytes in nanoseconds and bytes, or curve_ns"
            );
        }
        Ok(())
    }

    /// Check the analytic model's fields (a kernel without `curve_ns`): a geometry, times and
    /// sizes of 0 or more, and positive bandwidths.
    fn check_analytic(&self, name: &str) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.blocks > 0 && self.blocks_per_sm > 0,
            "kernel {name}: blocks and blocks_per_sm must be positive (or give curve_ns)"
        );
        // A negative time or size made flat bounds of 160 ns, calibrated without a word.
        for (field, v) in [
            ("launch_ns", self.launch_ns),
            ("wave_ns", self.wave_ns),
            ("bytes", self.bytes),
            ("contention_ns_per_sm", self.contention_ns_per_sm),
        ] {
            anyhow::ensure!(
                v.is_finite() && v >= 0.0,
                "kernel {name}: {field} is {v}; accepted: a number of 0 or more"
            );
        }
        anyhow::ensure!(
            self.sm_bytes_per_ns > 0.0 && self.roof_bytes_per_ns > 0.0,
            "kernel {name}: bandwidths must be positive"
        );
        Ok(())
    }

    /// A manifest's `[sim]` table checked without a device (`wcetctl kernels check`): its types,
    /// and its curve's sizes and times, but not whether they are the device's realisable sizes,
    /// which only the daemon knows.
    pub fn check_without_device(m: &Manifest) -> anyhow::Result<()> {
        let Some(table) = &m.sim else { return Ok(()) };
        let physics: KernelPhysics = toml::Value::Table(table.clone())
            .try_into()
            .map_err(|e| anyhow::anyhow!("kernel {}: [sim] table: {e}", m.name))?;
        let mut sizes: Vec<u32> = match &physics.curve_ns {
            Some(curve) => curve.iter().map(|&(m, _)| m).collect(),
            None => Vec::new(),
        };
        sizes.sort_unstable();
        sizes.dedup();
        // No device has a partition of 0 SMs; the daemon would refuse it as unrealisable.
        anyhow::ensure!(
            sizes.first() != Some(&0),
            "kernel {}: curve_ns gives 0 SMs; accepted: [sms, ns] pairs with sms of 1 or more (the device's realisable sizes)",
            m.name
        );
        // As the daemon takes it: `blocks` and `blocks_per_sm` default to the manifest's launch.
        Self::of_manifest(m, &sizes).map(|_| ())
    }

    /// How the simulator runs a manifest's kernel: its `[sim]` table (a tabulated `curve_ns`, or
    /// the physical fields of a profile kernel; `blocks` and `blocks_per_sm` default to the
    /// manifest's launch), or without one the documented default: the manifest's grid in waves of
    /// its occupancy hint (else 2048 threads per SM, at most 32 blocks) at 10 µs a wave, its
    /// buffers read once at 25 bytes/ns per SM up to a 3,000 bytes/ns roof, 4 µs of launch.
    pub fn of_manifest(m: &Manifest, sizes: &[PartitionSize]) -> anyhow::Result<KernelPhysics> {
        let blocks_per_sm = m
            .blocks_per_sm
            .unwrap_or_else(|| (2048 / m.threads_per_block().max(1)).clamp(1, 32));
        let mut physics = match &m.sim {
            Some(table) => {
                // 0 is how the fields say "not given" (the manifest's launch is taken), so one
                // written as 0 is refused as the manifest's own `blocks_per_sm = 0` is.
                for field in ["blocks", "blocks_per_sm"] {
                    anyhow::ensure!(
                        table.get(field).and_then(toml::Value::as_integer) != Some(0),
                        "kernel {}: [sim] {field} is 0; accepted: at least 1, or leave it out to take the manifest's launch",
                        m.name
                    );
                }
                let physics: KernelPhysics = toml::Value::Table(table.clone())
                    .try_into()
                    .map_err(|e| anyhow::anyhow!("kernel {}: [sim] table: {e}", m.name))?;
                physics
            }
            None => KernelPhysics {
                launch_ns: 4_000.0,
                wave_ns: 10_000.0,
                bytes: m.buffer_bytes() as f64,
                sm_bytes_per_ns: 25.0,
                roof_bytes_per_ns: 3_000.0,
                ..KernelPhysics::default()
            },
        };
        if physics.blocks == 0 {
            physics.blocks = m.blocks();
        }
        if physics.blocks_per_sm == 0 {
            physics.blocks_per_sm = blocks_per_sm;
        }
        if m.sim.is_none() {
            physics.sm_bytes_per_ns = 25.0;
            physics.roof_bytes_per_ns = 3_000.0;
        }
        physics.check(&m.name, sizes)?;
        Ok(physics)
    }

    /// Noise-free time of one launch on `sms` SMs, with the neighbours' memory slowdown factor.
    pub fn ideal_ns(&self, sms: u32, memory_slowdown: f64) -> f64 {
        let base = match &self.curve_ns {
            Some(curve) => {
                let t = curve
                    .iter()
                    .find(|(m, _)| *m == sms)
                    .or_else(|| curve.iter().rev().find(|(m, _)| *m <= sms))
                    .or(curve.first())
                    .map_or(0.0, |(_, t)| *t);
                t * (1.0 + memory_slowdown * self.memory_fraction)
            }
            None => self.law_ns(sms, memory_slowdown),
        };
        self.with_effects(sms, base)
    }

    /// The time law of the module documentation, with the uneven-wave and occupancy effects.
    fn law_ns(&self, sms: u32, memory_slowdown: f64) -> f64 {
        let m = f64::from(sms.max(1));
        let compute = self.wave_ns * self.waves_cost(sms);
        let bandwidth = (m * self.sm_bytes_per_ns).min(self.roof_bytes_per_ns);
        let memory = self.bytes / bandwidth * (1.0 + memory_slowdown);
        let extra_sms = f64::from(sms.saturating_sub(self.contention_onset_sms));
        self.launch_ns + compute.max(memory) + self.contention_ns_per_sm * extra_sms
    }

    /// Waves of blocks on `sms` SMs at the occupancy that really holds, the partial last wave
    /// costing what `partial_wave_cost` says.
    fn waves_cost(&self, sms: u32) -> f64 {
        let per_sm = self
            .effects
            .actual_blocks_per_sm
            .unwrap_or(self.blocks_per_sm)
            .max(1);
        let slots = f64::from(sms.max(1) * per_sm);
        let exact = f64::from(self.blocks) / slots;
        let full = exact.floor();
        let fill = exact - full;
        if fill <= 0.0 {
            return full;
        }
        let c = self.effects.partial_wave_cost.unwrap_or(1.0);
        full + c + (1.0 - c) * fill
    }

    /// The effects that act on the whole launch: hump, GPC imbalance, saturating atomics.
    fn with_effects(&self, sms: u32, base: f64) -> f64 {
        let m = f64::from(sms);
        let e = &self.effects;
        let hump = e.l2_hump.as_ref().map_or(1.0, |h| {
            1.0 + h.height * (-0.5 * ((m - h.center_sms) / h.width_sms).powi(2)).exp()
        });
        let gpc = e.gpc_imbalance.as_ref().map_or(1.0, |g| {
            if sms.is_multiple_of(g.sms_per_gpc.max(1)) {
                1.0
            } else {
                1.0 + g.penalty
            }
        });
        let atomics = e
            .atomics
            .as_ref()
            .map_or(0.0, |a| a.ns_per_sm * f64::from(sms.min(a.saturate_sms)));
        base * hump * gpc + atomics
    }
}

impl DeviceProfile {
    pub fn h200() -> Self {
        Self::parse(include_str!("../../calibration/profiles/h200.toml"))
            .expect("the built-in H200 profile parses")
    }

    pub fn embedded() -> Self {
        Self::parse(include_str!("../../calibration/profiles/embedded.toml"))
            .expect("the built-in embedded profile parses")
    }

    /// A built-in profile by name (`h200`, `embedded`) or a profile file.
    pub fn load(name_or_path: &str) -> anyhow::Result<Self> {
        match name_or_path {
            "h200" => Ok(Self::h200()),
            "embedded" => Ok(Self::embedded()),
            path => {
                let text = crate::manifest::read_text_limited(Path::new(path), 1 << 20).map_err(|e| {
                    anyhow::anyhow!(
                        "cannot read simulator profile `{path}`: {e}; accepted: h200, embedded, or a TOML file"
                    )
                })?;
                Self::parse(&text).map_err(|e| anyhow::anyhow!("simulator profile `{path}`: {e}"))
            }
        }
    }

    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let profile: DeviceProfile = toml::from_str(text)?;
        profile.validate()?;
        Ok(profile)
    }

    fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.total_sms > 0, "total_sms must be positive");
        anyhow::ensure!(
            self.partition_step_sms > 0 && self.partition_step_sms <= self.total_sms,
            "partition_step_sms must be between 1 and total_sms"
        );
        anyhow::ensure!(
            self.throttle.clock_factor > 0.0 && self.throttle.clock_factor <= 1.0,
            "throttle.clock_factor must be in (0, 1]"
        );
        let sizes = self.partition_sizes();
        for (name, k) in &self.kernels {
            k.check(name, &sizes)?;
        }
        Ok(())
    }

    pub fn partition_sizes(&self) -> Vec<PartitionSize> {
        let step = self.partition_step_sms;
        let mut sizes: Vec<u32> = (1..=self.total_sms / step).map(|i| i * step).collect();
        if sizes.last() != Some(&self.total_sms) {
            sizes.push(self.total_sms);
        }
        sizes
    }
}

/// Knobs of a simulated run that are not physics: the seed, fault injection and pacing.
#[derive(Debug, Clone, Default)]
pub struct SimOptions {
    pub seed: u64,
    /// Fail with a device fault once this many timed launches have run (fault-injection tests).
    pub fault_after_launches: Option<u64>,
    /// The injected fault is one the process cannot recover from ([`GpuError::Lost`]).
    pub fault_is_lost: bool,
    /// Really sleep this long per launch, so that jobs take observable time in tests and demos.
    pub pace_us_per_launch: u64,
    /// Report this SM clock from `telemetry()` (batches still run at the nominal clock): models a
    /// clock drop after calibration, for testing clock-scaled bounds.
    pub clock_mhz_override: Option<u32>,
    /// Which of several simulated devices this is (`wcetd --sim-devices N`): part of its UUID, so
    /// each has its own fingerprint and store file. Device 0 keeps the UUID a single one had.
    pub device_index: u32,
}

pub struct SimGpu {
    profile: DeviceProfile,
    info: DeviceInfo,
    options: SimOptions,
    batches_run: u64,
    launches_run: u64,
    /// Set by a kernel's [`Effects::device_fault`]: every later call fails with it.
    lost: Option<String>,
}

/// The UUID of the simulated device `index` of `profile`: stable, and apart per index.
pub fn uuid_of(profile: &DeviceProfile, index: u32) -> String {
    let name = crate::fnv::fnv1a(profile.name.as_bytes());
    match index {
        0 => format!("SIM-{name:016x}"),
        n => format!("SIM-{name:016x}-{n}"),
    }
}

impl SimGpu {
    pub fn new(profile: DeviceProfile, options: SimOptions) -> Self {
        let fingerprint = Fingerprint {
            backend: Backend::Sim,
            device: profile.name.clone(),
            uuid: uuid_of(&profile, options.device_index),
            driver: format!("wcetd-sim {}", env!("CARGO_PKG_VERSION")),
            cuda: "none".into(),
            clock_policy: format!("nominal:{}MHz", profile.sm_clock_mhz),
        };
        let info = DeviceInfo {
            name: profile.name.clone(),
            backend: Backend::Sim,
            total_sms: profile.total_sms,
            sms_per_tpc: profile.sms_per_tpc,
            partition_sizes: profile.partition_sizes(),
            sm_clock_mhz: profile.sm_clock_mhz,
            fingerprint,
            cc: 90,
            unusable_sizes: Vec::new(),
        };
        SimGpu {
            profile,
            info,
            options,
            batches_run: 0,
            launches_run: 0,
            lost: None,
        }
    }

    pub fn profile(&self) -> &DeviceProfile {
        &self.profile
    }

    fn rng_for(&self, kernel: &str, sms: u32) -> ChaCha8Rng {
        let mut key = Vec::with_capacity(kernel.len() + 20);
        key.extend_from_slice(&self.options.seed.to_le_bytes());
        key.extend_from_slice(kernel.as_bytes());
        key.extend_from_slice(&sms.to_le_bytes());
        key.extend_from_slice(&self.batches_run.to_le_bytes());
        ChaCha8Rng::seed_from_u64(crate::fnv::fnv1a(&key))
    }

    /// The profile's kernel of that name, or a manifest's (see [`KernelPhysics::of_manifest`]).
    fn physics(&self, kernel: &KernelSpec) -> Result<KernelPhysics, GpuError> {
        if let Some(p) = self.profile.kernels.get(&kernel.name) {
            return Ok(p.clone());
        }
        match kernel.manifest() {
            Some(m) => KernelPhysics::of_manifest(m, &self.info.partition_sizes).map_err(|e| {
                GpuError::Driver {
                    call: "simulator",
                    detail: format!("{e:#}"),
                }
            }),
            None => Err(GpuError::UnsupportedKernel(kernel.name.clone())),
        }
    }

    fn nominal_telemetry(&self) -> Telemetry {
        Telemetry {
            sm_clock_mhz: Some(self.profile.sm_clock_mhz),
            mem_clock_mhz: Some(2619),
            temperature_c: Some(45),
            power_mw: Some(300_000),
            throttle_reasons: Vec::new(),
            throttle_ns: 0,
            idle: false,
        }
    }

    /// Refuse a manifest kernel whose buffers the device cannot hold, as the CUDA backend does.
    fn check_memory(&self, kernel: &KernelSpec) -> Result<(), GpuError> {
        let Some(m) = kernel.manifest() else {
            return Ok(());
        };
        let (need, total) = (m.buffer_bytes(), self.profile.memory_bytes);
        if need > total {
            return Err(GpuError::Driver {
                call: "cuMemAlloc",
                detail: format!(
                    "`{}` asks for {need} bytes of buffers; the device has {total} bytes (simulated)",
                    m.name
                ),
            });
        }
        Ok(())
    }

    fn check_fault(&self) -> Result<(), GpuError> {
        if let Some(why) = &self.lost {
            return Err(GpuError::Lost(why.clone()));
        }
        match self.options.fault_after_launches {
            Some(limit) if self.launches_run >= limit => {
                let what = format!(
                    "simulated device fault after {limit} launches (Xid 79: GPU has fallen off the bus)"
                );
                Err(if self.options.fault_is_lost {
                    GpuError::Lost(what)
                } else {
                    GpuError::Fault(what)
                })
            }
            _ => Ok(()),
        }
    }

    /// The share of the device a contended run's stressor takes: every SM outside the partition.
    fn stressor_share(&self, request: &RunRequest) -> f64 {
        match request.interference {
            Interference::Isolated => 0.0,
            Interference::Contended => {
                f64::from(self.info.total_sms - request.sms) / f64::from(self.info.total_sms)
            }
        }
    }

    /// Time `launches` launches of a kernel whose ideal time is `ideal` ns: each slowed while the
    /// throttle `episode` lasts, jittered, and perhaps delayed. A seed's output rests on the
    /// order of the draws from `rng`, launch by launch: jitter, additive noise, delay.
    fn time_launches(
        &mut self,
        rng: &mut ChaCha8Rng,
        physics: &KernelPhysics,
        ideal: f64,
        episode: Option<(u32, u32)>,
        launches: u32,
    ) -> Result<Vec<u64>, GpuError> {
        let mut times_ns = Vec::with_capacity(launches as usize);
        for i in 0..launches {
            self.check_fault()?;
            let clock = match episode {
                Some((start, end)) if (start..end).contains(&i) => {
                    self.profile.throttle.clock_factor
                }
                _ => 1.0,
            };
            let mut t = ideal * jitter_factor(rng, &physics.jitter) / clock;
            if physics.jitter.additive_ns > 0.0 {
                t += physics.jitter.additive_ns * standard_normal(rng).abs().min(4.0);
            }
            t += self.profile.delays.draw(rng);
            times_ns.push(t.round() as u64);
            self.launches_run += 1;
            if self.options.pace_us_per_launch > 0 {
                std::thread::sleep(std::time::Duration::from_micros(
                    self.options.pace_us_per_launch,
                ));
            }
        }
        Ok(times_ns)
    }

    /// The batch of `times_ns`: the telemetry after it (naming the throttle `episode`, if one
    /// ran), and the stressor it ran beside.
    fn batch(
        &self,
        request: &RunRequest,
        physics: &KernelPhysics,
        times_ns: Vec<u64>,
        episode: Option<(u32, u32)>,
    ) -> Batch {
        let mut after = self.nominal_telemetry();
        if let Some((start, end)) = episode {
            after.throttle_reasons.push(format!(
                "sw_thermal_slowdown (launches {start}..{end} at {:.0}% clock)",
                self.profile.throttle.clock_factor * 100.0
            ));
        }
        let stressor_sms = match request.interference {
            Interference::Contended => self.info.total_sms - request.sms,
            Interference::Isolated => 0,
        };
        Batch {
            times_ns,
            granted_sms: request.sms,
            geometry: physics.geometry(),
            telemetry: after,
            interference: if stressor_sms > 0 {
                Interference::Contended
            } else {
                Interference::Isolated
            },
            stressor_sms,
        }
    }
}

impl Gpu for SimGpu {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn run(&mut self, kernel: &KernelSpec, request: &RunRequest) -> Result<Batch, GpuError> {
        self.check_partition(request.sms)?;
        self.check_memory(kernel)?;
        let physics = self.physics(kernel)?;
        self.check_fault()?;
        if let Some(error) = &physics.effects.device_fault {
            let why = format!(
                "simulated {error} in kernel `{}` (a sticky error: the context is unusable)",
                kernel.name
            );
            self.lost = Some(why.clone());
            return Err(GpuError::Lost(why));
        }
        let ideal = physics.ideal_ns(
            request.sms,
            self.profile.interference.memory_slowdown * self.stressor_share(request),
        );
        let mut rng = self.rng_for(&kernel.name, request.sms);
        let episode = throttle_episode(&mut rng, &self.profile.throttle, request.launches);
        let times_ns = self.time_launches(&mut rng, &physics, ideal, episode, request.launches)?;
        self.batches_run += 1;
        Ok(self.batch(request, &physics, times_ns, episode))
    }

    fn delay_probe(&mut self, sms: PartitionSize, launches: u32) -> Result<Vec<u64>, GpuError> {
        self.check_partition(sms)?;
        let mut rng = self.rng_for("wcetd.delay-probe", sms);
        self.batches_run += 1;
        let mut times = Vec::with_capacity(launches as usize);
        // The device throttles during the probe as during any batch: an episode may start in
        // every stretch of a kernel batch's length.
        let mut episode = None;
        for i in 0..launches {
            self.check_fault()?;
            // An episode runs its full length (the probe is one long batch, not many short ones).
            let running = episode.is_some_and(|(_, end)| i < end);
            if i % PROBE_STRETCH == 0 && !running {
                episode = throttle_episode(&mut rng, &self.profile.throttle, PROBE_STRETCH)
                    .map(|(start, _)| (i + start, i + start + self.profile.throttle.run_length));
            }
            let clock = match episode {
                Some((start, end)) if (start..end).contains(&i) => {
                    self.profile.throttle.clock_factor
                }
                _ => 1.0,
            };
            let body = PROBE_NS * (1.0 + 0.001 * standard_normal(&mut rng).abs().min(4.0)) / clock;
            times.push((body + self.profile.delays.draw(&mut rng)).round() as u64);
            self.launches_run += 1;
        }
        Ok(times)
    }

    fn telemetry(&mut self) -> Telemetry {
        let mut now = self.nominal_telemetry();
        if let Some(mhz) = self.options.clock_mhz_override {
            now.sm_clock_mhz = Some(mhz);
        }
        now
    }
}

/// Multiplicative jitter of one launch: 1 + body + (rarely) a tail delay.
fn jitter_factor(rng: &mut ChaCha8Rng, j: &Jitter) -> f64 {
    let body = j.body_sigma * standard_normal(rng).abs().min(4.0);
    let tail = if rng.random::<f64>() < j.tail_probability {
        let u: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
        (j.tail_scale * (u.powf(-1.0 / j.tail_alpha) - 1.0)).min(j.tail_cap)
    } else {
        0.0
    };
    1.0 + body + tail
}

/// The launches, if any, that run at a throttled clock in this batch.
fn throttle_episode(
    rng: &mut ChaCha8Rng,
    t: &ThrottleProfile,
    launches: u32,
) -> Option<(u32, u32)> {
    if launches == 0 || rng.random::<f64>() >= t.batch_probability {
        return None;
    }
    let start = rng.random_range(0..launches);
    Some((start, (start + t.run_length).min(launches)))
}

/// Box-Muller; enough for jitter and avoids another dependency.
fn standard_normal(rng: &mut ChaCha8Rng) -> f64 {
    let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels;

    fn request(sms: u32) -> RunRequest {
        RunRequest {
            sms,
            warmup: 2,
            launches: 200,
            interference: Interference::Isolated,
        }
    }

    /// The simulator refuses a manifest kernel whose buffers the device cannot hold, as the GPU
    /// does: a 16 EiB buffer had been timed and served as a 222-day bound.
    #[test]
    fn a_manifest_kernel_larger_than_the_device_memory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(\n    .param .u64 a\n)\n{\n    ret;\n}\n";
        std::fs::write(dir.path().join("k.ptx"), ptx).unwrap();
        let text = "name = \"big\"\nmodule = \"k.ptx\"\nentry = \"k\"\ngrid = [64, 1, 1]\nblock = [256, 1, 1]\nargs = [{ buffer = 20000000000 }]\n";
        let path = dir.path().join("big.toml");
        std::fs::write(&path, text).unwrap();
        let kernel = KernelSpec::from_manifest(crate::manifest::load(&path).unwrap());
        let mut small = SimGpu::new(DeviceProfile::embedded(), SimOptions::default());
        let refused = small.run(&kernel, &request(16)).unwrap_err().to_string();
        assert!(
            refused.contains("20000000000 bytes of buffers; the device has 16000000000"),
            "{refused}"
        );
        let mut large = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
        assert!(large.run(&kernel, &request(64)).is_ok());
    }

    /// `[sim]` fields that give no time (only a geometry), or more than an hour, are refused,
    /// with and without a device, as `curve_ns` out of range is: they timed every launch at
    /// 0 ns (a bound of 1 ns) or at 2^64 - 1 ns, served as measured (a black-box hunt found
    /// them). So is a `blocks` or `blocks_per_sm` of 0, which the manifest's own key refuses.
    #[test]
    fn sim_fields_that_give_no_time_or_more_than_an_hour_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(\n    .param .u64 a\n)\n{\n    ret;\n}\n";
        std::fs::write(dir.path().join("k.ptx"), ptx).unwrap();
        let head = "name = \"t\"\nmodule = \"k.ptx\"\nentry = \"k\"\ngrid = [1024, 1, 1]\nblock = [256, 1, 1]\nargs = [{ buffer = 4096, fill = \"zero\" }]\n[sim]\n";
        let sizes = DeviceProfile::h200().partition_sizes();
        let cases = [
            ("blocks = 2048\n", "give a launch of 0 ns"),
            ("launch_ns = 1e300\n", "give a launch of 1e300 ns"),
            ("wave_ns = 1e13\n", "give a launch of"),
            ("blocks = 0\nwave_ns = 1000.0\n", "[sim] blocks is 0"),
            (
                "blocks_per_sm = 0\nwave_ns = 1000.0\n",
                "[sim] blocks_per_sm is 0",
            ),
        ];
        for (sim, refusal) in cases {
            let path = dir.path().join("t.toml");
            std::fs::write(&path, format!("{head}{sim}")).unwrap();
            let m = crate::manifest::load(&path).unwrap();
            for checked in [
                KernelPhysics::check_without_device(&m),
                KernelPhysics::of_manifest(&m, &sizes).map(|_| ()),
            ] {
                let why = checked.unwrap_err().to_string();
                assert!(
                    why.contains(refusal) && why.contains("accepted"),
                    "{sim}: {why}"
                );
            }
        }
        let path = dir.path().join("t.toml");
        std::fs::write(&path, format!("{head}launch_ns = 1.0\nwave_ns = 3.6e12\n")).unwrap();
        let m = crate::manifest::load(&path).unwrap();
        assert!(
            KernelPhysics::check_without_device(&m).is_err(),
            "an hour and 1 ns"
        );
        std::fs::write(&path, format!("{head}wave_ns = 1000.0\n")).unwrap();
        let m = crate::manifest::load(&path).unwrap();
        KernelPhysics::check_without_device(&m).unwrap();
        KernelPhysics::of_manifest(&m, &sizes).unwrap();
    }

    #[test]
    fn profiles_give_the_documented_partition_sizes() {
        let h200 = DeviceProfile::h200().partition_sizes();
        assert_eq!(h200.len(), 17);
        assert_eq!(h200.first(), Some(&8));
        assert_eq!(h200.last(), Some(&132));
        assert_eq!(
            DeviceProfile::embedded().partition_sizes(),
            vec![2, 4, 6, 8, 10, 12, 14, 16]
        );
    }

    #[test]
    fn same_seed_same_samples_other_seed_other_samples() {
        let k = kernels::find("hotspot").unwrap();
        let run = |seed| {
            let mut gpu = SimGpu::new(
                DeviceProfile::h200(),
                SimOptions {
                    seed,
                    ..Default::default()
                },
            );
            gpu.run(&k, &request(64)).unwrap().times_ns
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }

    #[test]
    fn physics_shows_waves_roofs_and_contention() {
        let p = DeviceProfile::h200();
        let hotspot = &p.kernels["hotspot"];
        // 1156 blocks, 8 per SM: 48 SMs need 4 waves like 40 SMs do, so no gain from 40 to 48.
        assert_eq!(hotspot.ideal_ns(40, 0.0), hotspot.ideal_ns(48, 0.0));
        let backprop = &p.kernels["backprop"];
        assert_eq!(
            backprop.ideal_ns(64, 0.0),
            backprop.ideal_ns(128, 0.0),
            "past the roof"
        );
        let bfs = &p.kernels["bfs"];
        assert!(
            bfs.ideal_ns(132, 0.0) > bfs.ideal_ns(64, 0.0),
            "more SMs can be slower"
        );
    }

    #[test]
    fn samples_never_go_below_the_noise_free_time() {
        let k = kernels::find("tmatch").unwrap();
        let mut gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
        let ideal = gpu.profile().kernels["tmatch"].ideal_ns(16, 0.0);
        let batch = gpu.run(&k, &request(16)).unwrap();
        assert!(batch.times_ns.iter().all(|&t| t as f64 >= ideal.floor()));
    }

    #[test]
    fn a_stressor_slows_memory_bound_kernels() {
        let k = kernels::find("backprop").unwrap();
        let mut gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
        let iso = gpu.run(&k, &request(32)).unwrap().times_ns;
        let mut contended = request(32);
        contended.interference = Interference::Contended;
        let con = gpu.run(&k, &contended).unwrap().times_ns;
        assert!(con.iter().max() > iso.iter().max());
    }

    #[test]
    fn unrealisable_sizes_and_injected_faults_are_errors() {
        let k = kernels::find("needle").unwrap();
        let mut gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
        assert!(matches!(
            gpu.run(&k, &request(12)),
            Err(GpuError::InvalidPartition { .. })
        ));
        let mut faulty = SimGpu::new(
            DeviceProfile::h200(),
            SimOptions {
                fault_after_launches: Some(50),
                ..Default::default()
            },
        );
        assert!(matches!(
            faulty.run(&k, &request(8)),
            Err(GpuError::Fault(_))
        ));
    }

    fn foreign(file: &str) -> DeviceProfile {
        DeviceProfile::load(&format!(
            "{}/calibration/profiles/foreign/{file}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    }

    #[test]
    fn foreign_profiles_parse_and_their_effects_bend_the_law() {
        for file in [
            "dev-h200.toml",
            "dev-embedded.toml",
            "report-h200.toml",
            "report-embedded.toml",
        ] {
            assert!(foreign(file).kernels.len() >= 8, "{file}");
        }
        let p = foreign("dev-h200.toml");
        let hump = &p.kernels["dev.hump"];
        let mut plain = hump.clone();
        plain.effects = Effects::default();
        let ratio = |m| hump.ideal_ns(m, 0.0) / plain.ideal_ns(m, 0.0);
        assert!((ratio(96) - 1.30).abs() < 1e-9 && ratio(8) < 1.001);
        let gpc = &p.kernels["dev.gpc"];
        assert!(
            gpc.ideal_ns(40, 0.0) > gpc.ideal_ns(48, 0.0) * 1.05,
            "40 splits a GPC"
        );
        let occ = &p.kernels["dev.occupancy"];
        assert_eq!(
            occ.geometry().unwrap().blocks_per_sm,
            8,
            "the hint is reported"
        );
        // 1024 blocks fill 2 waves of 64 SMs at 8 per SM; at the 7 that fit they need 3.
        assert_eq!(occ.ideal_ns(64, 0.0), 4000.0 + 9000.0 * 3.0);
        let atomics = &p.kernels["dev.atomics"];
        let mut plain = atomics.clone();
        plain.effects = Effects::default();
        let added = |m| atomics.ideal_ns(m, 0.0) - plain.ideal_ns(m, 0.0);
        assert!((added(64) - 250.0 * 64.0).abs() < 1e-6 && added(128) == added(72));
        let table = &p.kernels["dev.table"];
        assert_eq!(table.ideal_ns(80, 0.0), 60_000.0);
        assert!(table.geometry().is_none());
    }

    #[test]
    fn a_curve_must_cover_every_realisable_size() {
        let text = include_str!("../../calibration/profiles/embedded.toml").to_string()
            + "\n[kernels.t]\ncurve_ns = [[2, 100.0], [4, 90.0]]\n";
        let err = DeviceProfile::parse(&text).unwrap_err().to_string();
        assert!(
            err.contains("[6, 8, 10, 12, 14, 16]") && err.contains("accepted"),
            "{err}"
        );
    }

    /// A black-box run gave 8 SMs twice (the second, 900 us, ignored: a bound of 66 us was
    /// served there), times in seconds, and a size the device does not have; all were taken.
    #[test]
    fn a_curve_gives_each_realisable_size_once_in_nanoseconds() {
        let embedded = include_str!("../../calibration/profiles/embedded.toml");
        let with = |pairs: &str| {
            let all = "[2, 100.0], [4, 90.0], [6, 80.0], [8, 70.0], [10, 60.0], [12, 50.0], [14, 40.0], [16, 30.0]";
            DeviceProfile::parse(&format!(
                "{embedded}\n[kernels.t]\ncurve_ns = [{all}{pairs}]\n"
            ))
            .map(|_| ())
            .map_err(|e| e.to_string())
        };
        assert_eq!(with(""), Ok(()));
        let twice = with(", [8, 900.0]").unwrap_err();
        assert!(twice.contains("gives 8 SMs more than once"), "{twice}");
        let absent = with(", [18, 20.0]").unwrap_err();
        assert!(
            absent.contains("18 SMs, which this device cannot realise"),
            "{absent}"
        );
        let seconds = with("").and(with(", [3, 1.0]")).unwrap_err();
        assert!(seconds.contains("3 SMs"), "{seconds}");
        let text = format!("{embedded}\n[kernels.t]\ncurve_ns = [[2, 0.00005], [4, 90.0], [6, 80.0], [8, 70.0], [10, 60.0], [12, 50.0], [14, 40.0], [16, 30.0]]\n");
        let unit = DeviceProfile::parse(&text).unwrap_err().to_string();
        assert!(
            unit.contains("gives 0.00005 at 2 SMs") && unit.contains("from 1 to one hour"),
            "{unit}"
        );
        // And past an hour: 1e30 was served as a bound of 2^64 - 1 ns.
        let huge = DeviceProfile::parse(&text.replace("0.00005", "1e30"))
            .unwrap_err()
            .to_string();
        assert!(
            huge.contains("at 2 SMs") && huge.contains("from 1 to one hour"),
            "{huge}"
        );
        let empty = format!("{embedded}\n[kernels.t]\ncurve_ns = []\n");
        assert!(DeviceProfile::parse(&empty).is_err());
    }

    #[test]
    fn additive_jitter_and_uncapped_tails_are_drawn() {
        let p = foreign("dev-h200.toml");
        let k = kernels::simulated("dev.pareto");
        let mut gpu = SimGpu::new(p.clone(), SimOptions::default());
        let mut r = request(8);
        r.launches = 20_000;
        let times = gpu.run(&k, &r).unwrap().times_ns;
        let ideal = p.kernels["dev.pareto"].ideal_ns(8, 0.0);
        let worst = *times.iter().max().unwrap() as f64 / ideal;
        assert!(worst > 1.06, "some delay beyond the old 6% cap: {worst}");
        let k = kernels::simulated("dev.additive");
        let times = gpu.run(&k, &request(128)).unwrap().times_ns;
        let ideal = p.kernels["dev.additive"].ideal_ns(128, 0.0);
        let spread = (*times.iter().max().unwrap() as f64 - ideal) / ideal;
        assert!(
            spread > 0.1,
            "3 us of additive jitter on a ~45 us launch: {spread}"
        );
    }
}
