//! The kernel catalogue: which kernels the daemon knows, what each computes, and the launch
//! geometry the model may use as a hint.
//!
//! The built-in suite follows the Rodinia kernels used in TPC-partitioning research (needle,
//! backprop, gaussian, bfs, hotspot, lud, srad) plus a template matcher in place of heartwall.
//! Their CUDA C sources live in `kernels/` and are compiled at run time with NVRTC by the CUDA
//! backend; the simulator gives each one a physical profile instead (`calibration/profiles/`).

use serde::{Deserialize, Serialize};

/// Grid size and residency of one kernel launch: what decides how many waves of thread blocks a
/// partition of m SMs needs (`ceil(blocks / (m * blocks_per_sm))`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Geometry {
    pub blocks: u32,
    pub blocks_per_sm: u32,
}

impl Geometry {
    /// Waves of thread blocks on `sms` SMs.
    pub fn waves(&self, sms: u32) -> u32 {
        let per_wave = sms.max(1).saturating_mul(self.blocks_per_sm.max(1));
        self.blocks.div_ceil(per_wave)
    }
}

/// A kernel the daemon can calibrate. The built-in suite's problem sizes are chosen so that the
/// timed step takes tens of microseconds or more on a whole Hopper GPU: well above the event
/// timer's half-microsecond resolution and the couple of microseconds of launch overhead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSpec {
    pub name: &'static str,
    pub summary: &'static str,
    /// CUDA C source, compiled with NVRTC by the CUDA backend.
    pub source: &'static str,
    /// Problem size (side of the matrix, grid, image or graph scale, per kernel).
    pub problem_size: u32,
    /// Seed of the input generator, so every run measures the same input.
    pub input_seed: u64,
}

macro_rules! kernel {
    ($name:literal, $summary:literal, $size:expr) => {
        KernelSpec {
            name: $name,
            summary: $summary,
            source: include_str!(concat!("../kernels/", $name, ".cu")),
            problem_size: $size,
            input_seed: 0x5eed,
        }
    };
}

/// The built-in suite, in the order tables list it.
pub fn builtin_suite() -> Vec<KernelSpec> {
    vec![
        kernel!(
            "needle",
            "Needleman-Wunsch alignment of 8,192 pairs of 64-long sequences, one tile anti-diagonal",
            8192
        ),
        kernel!(
            "backprop",
            "Neural-network layer forward pass and weight adjust",
            1 << 22
        ),
        kernel!("gaussian", "Gaussian elimination, Fan1/Fan2 step", 4096),
        kernel!(
            "bfs",
            "Breadth-first search frontier expansion on a generated graph",
            1 << 21
        ),
        kernel!("hotspot", "2-D thermal simulation stencil", 4096),
        kernel!(
            "lud",
            "LU decomposition, diagonal/perimeter/internal blocks",
            4096
        ),
        kernel!(
            "srad",
            "Speckle-reducing anisotropic diffusion, two passes",
            2048
        ),
        kernel!(
            "tmatch",
            "Template matching (normalised cross-correlation), in place of heartwall",
            1024
        ),
    ]
}

/// Names of the built-in suite, without building the catalogue (for the query hot path).
pub const BUILTIN_NAMES: [&str; 8] = [
    "needle", "backprop", "gaussian", "bfs", "hotspot", "lud", "srad", "tmatch",
];

pub fn is_builtin(name: &str) -> bool {
    BUILTIN_NAMES.contains(&name)
}

/// Look a kernel up by name in the built-in suite.
pub fn find(name: &str) -> Option<KernelSpec> {
    builtin_suite().into_iter().find(|k| k.name == name)
}

/// A kernel known only to the simulator (a profile's foreign shape): the built-in one of that
/// name, or a spec with no source. Offline tools ask for a handful per run, so the name is
/// leaked to give it the catalogue's `'static` lifetime.
pub fn simulated(name: &str) -> KernelSpec {
    find(name).unwrap_or_else(|| KernelSpec {
        name: Box::leak(name.to_string().into_boxed_str()),
        summary: "simulated kernel from a device profile",
        source: "",
        problem_size: 0,
        input_seed: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waves_follow_the_ceiling_of_blocks_over_capacity() {
        let g = Geometry {
            blocks: 528,
            blocks_per_sm: 2,
        };
        assert_eq!(g.waves(132), 2);
        assert_eq!(g.waves(128), 3);
        assert_eq!(g.waves(8), 33);
        assert_eq!(
            g.waves(0),
            264,
            "zero SMs is treated as one, never a division by zero"
        );
    }

    #[test]
    fn builtin_names_match_the_catalogue() {
        let names: Vec<_> = builtin_suite().iter().map(|k| k.name).collect();
        assert_eq!(names, BUILTIN_NAMES);
    }

    #[test]
    fn suite_names_are_unique() {
        let suite = builtin_suite();
        let mut names: Vec<_> = suite.iter().map(|k| k.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), suite.len());
    }
}
