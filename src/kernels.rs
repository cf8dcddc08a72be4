//! The kernel catalogue: which kernels the daemon knows, what each computes, and the launch
//! geometry the model may use as a hint.
//!
//! The built-in suite follows the Rodinia kernels used in TPC-partitioning research (needle,
//! backprop, gaussian, bfs, hotspot, lud, srad) plus a template matcher in place of heartwall.
//! Their CUDA C sources live in `kernels/` and are compiled at run time with NVRTC by the CUDA
//! backend; the simulator gives each one a physical profile instead (`calibration/profiles/`).
//! Users add their own kernels with manifests ([`crate::manifest`]); the [`Catalogue`] holds both.

use serde::{Deserialize, Serialize};
use std::sync::Arc;

use crate::manifest::Manifest;

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

/// A kernel the daemon can calibrate: its name, what it computes, and what runs it.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelSpec {
    pub name: String,
    pub summary: String,
    pub body: KernelBody,
}

/// What a kernel is made of.
#[derive(Debug, Clone, PartialEq)]
pub enum KernelBody {
    /// One of the built-in suite: CUDA C in `kernels/`, a seeded problem, a CPU reference.
    Builtin(Builtin),
    /// A user's kernel from a manifest (see [`crate::manifest`]).
    Manifest(Arc<Manifest>),
    /// Known only to the simulator (a device profile's foreign shape, or imported samples).
    Simulated,
}

/// A built-in kernel. The suite's problem sizes are chosen so that the timed step takes tens of
/// microseconds or more on a whole Hopper GPU: well above the event timer's half-microsecond
/// resolution and the couple of microseconds of launch overhead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Builtin {
    /// CUDA C source, compiled with NVRTC by the CUDA backend.
    pub source: &'static str,
    /// Problem size (side of the matrix, grid, image, graph scale or batch, per kernel).
    pub problem_size: u32,
    /// Seed of the input generator, so every run measures the same input.
    pub input_seed: u64,
    /// FNV-1a of the source, problem size and seed ([`KernelSpec::code_digest`]), computed once:
    /// every `GetBoundInfo` compares it with the calibration's.
    digest: u64,
}

impl Builtin {
    fn new(source: &'static str, problem_size: u32, input_seed: u64) -> Builtin {
        let digest =
            crate::fnv::fnv1a(format!("{source}\0{problem_size}\0{input_seed}").as_bytes());
        Builtin {
            source,
            problem_size,
            input_seed,
            digest,
        }
    }
}

impl KernelSpec {
    pub fn builtin(&self) -> Option<&Builtin> {
        match &self.body {
            KernelBody::Builtin(b) => Some(b),
            _ => None,
        }
    }

    pub fn manifest(&self) -> Option<&Manifest> {
        match &self.body {
            KernelBody::Manifest(m) => Some(m),
            _ => None,
        }
    }

    /// What decides what is timed, as a digest a calibration records: a manifest's
    /// [`Manifest::code_sha256`], or the built-in source, problem size and input seed. Empty for
    /// a kernel known only to the simulator.
    pub fn code_digest(&self) -> String {
        match &self.body {
            KernelBody::Builtin(b) => format!("{:016x}", b.digest),
            KernelBody::Manifest(m) => m.code_sha256.clone(),
            KernelBody::Simulated => String::new(),
        }
    }

    /// A kernel from a checked manifest.
    pub fn from_manifest(m: Manifest) -> KernelSpec {
        KernelSpec {
            name: m.name.clone(),
            summary: m.summary.clone(),
            body: KernelBody::Manifest(Arc::new(m)),
        }
    }
}

macro_rules! kernel {
    ($name:literal, $summary:literal, $size:expr) => {
        KernelSpec {
            name: $name.to_string(),
            summary: $summary.to_string(),
            body: KernelBody::Builtin(Builtin::new(
                include_str!(concat!("../kernels/", $name, ".cu")),
                $size,
                0x5eed,
            )),
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

/// Look a kernel up by name in the built-in suite.
pub fn find(name: &str) -> Option<KernelSpec> {
    builtin_suite().into_iter().find(|k| k.name == name)
}

/// A kernel known only to the simulator (a profile's foreign shape): the built-in one of that
/// name, or a spec with no body.
pub fn simulated(name: &str) -> KernelSpec {
    find(name).unwrap_or_else(|| KernelSpec {
        name: name.to_string(),
        summary: "simulated kernel from a device profile".into(),
        body: KernelBody::Simulated,
    })
}

/// The kernels a daemon serves: the built-in suite, then the manifests of its kernel
/// directories, each name once.
#[derive(Debug, Clone, PartialEq)]
pub struct Catalogue {
    kernels: Vec<KernelSpec>,
}

impl Default for Catalogue {
    fn default() -> Self {
        Catalogue {
            kernels: builtin_suite(),
        }
    }
}

impl Catalogue {
    /// The built-in suite plus `manifests`; a manifest whose name is taken (by the suite or an
    /// earlier manifest) is rejected with (file, reason).
    pub fn with_manifests(manifests: Vec<Manifest>) -> (Catalogue, Vec<(String, String)>) {
        let mut catalogue = Catalogue::default();
        let mut rejected = Vec::new();
        for m in manifests {
            if let Some(taken) = catalogue.get(&m.name) {
                // Which file keeps a name depends on when the two were read: a check (or a
                // start) reads in name order, a running daemon's reload keeps the file that had
                // it. Said, so that a check does not name a live manifest as the bad one.
                let by = match taken.manifest() {
                    Some(other) => format!(
                        "the manifest {} (read first: files are read in name order at a start and by `kernels check`; a running daemon's reload keeps the file that already had the name and rejects the other)",
                        other.path.display()
                    ),
                    None => "a built-in kernel".into(),
                };
                rejected.push((
                    m.path.display().to_string(),
                    format!(
                        "name `{}` is already taken by {by}; names must be unique",
                        m.name
                    ),
                ));
                continue;
            }
            catalogue.kernels.push(KernelSpec::from_manifest(m));
        }
        (catalogue, rejected)
    }

    pub fn get(&self, name: &str) -> Option<&KernelSpec> {
        self.kernels.iter().find(|k| k.name == name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &KernelSpec> {
        self.kernels.iter()
    }

    pub fn names(&self) -> Vec<String> {
        self.kernels.iter().map(|k| k.name.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The digest computed once is the one calibrations stored before recorded (FNV-1a of the
    /// source, problem size and seed joined by NULs): changing it would make them all stale.
    #[test]
    fn a_builtin_digest_is_the_one_calibrations_recorded() {
        for k in builtin_suite() {
            let b = k.builtin().unwrap();
            let text = format!("{}\0{}\0{}", b.source, b.problem_size, b.input_seed);
            assert_eq!(k.code_digest(), crate::fnv::fnv1a_hex(text.as_bytes()));
        }
        let needle = find("needle").unwrap().code_digest();
        assert_eq!(needle.len(), 16);
    }

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
        let names: Vec<_> = builtin_suite().into_iter().map(|k| k.name).collect();
        assert_eq!(names, BUILTIN_NAMES);
    }

    #[test]
    fn suite_names_are_unique() {
        let suite = builtin_suite();
        let mut names: Vec<_> = suite.iter().map(|k| k.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), suite.len());
    }
}
