//! Static work of the kernels the daemon knows, for predictions made before (or instead of)
//! measuring: each built-in kernel's timed launch from its launch plan (pure host code in the CUDA
//! backend's `suite`, no GPU) and its PTX (from NVRTC, which needs no GPU either); a manifest
//! kernel's from its grid and buffers, and FLOPs and bytes from its module when that is PTX
//! ([`from_manifest`]). Sits above the GPU layer, whose plans and compiler it uses, and below the
//! service: the model's predictor reads the [`StaticWork`] this makes and knows nothing of where
//! it came from.
//!
//! Building a plan generates the kernel's inputs (seconds for the whole suite), and NVRTC is not
//! on every host, so the built-in suite's figures are committed in `calibration/work/builtin.toml`
//! and read from there; a test rebuilds them from the plans and the PTX and fails when the file is
//! out of date.

use anyhow::Context;

use crate::gpu::cuda::nvrtc;
use crate::gpu::cuda::suite::{self, Arg, Plan};
use crate::kernels::{self, Catalogue, KernelBody};
use crate::manifest::{Manifest, ModuleKind};
use crate::model::predict::ptx::PtxFeatures;
use crate::model::predict::StaticWork;

/// Bytes of the distinct buffers the timed step is given.
fn footprint(plan: &Plan) -> f64 {
    let mut seen = Vec::new();
    for a in &plan.step.args {
        if let Arg::Buf(i) = a {
            if !seen.contains(i) {
                seen.push(*i);
            }
        }
    }
    seen.iter()
        .filter_map(|&i| plan.buffers.get(i))
        .map(|b| b.bytes() as f64)
        .sum()
}

fn plan_of(kernel: &str) -> anyhow::Result<Plan> {
    let spec = kernels::find(kernel).with_context(|| {
        format!(
            "no built-in kernel `{kernel}`; accepted: {}",
            kernels::BUILTIN_NAMES.join(", ")
        )
    })?;
    let b = spec.builtin().expect("the built-in suite has bodies");
    Ok(suite::plan(
        &spec.name,
        b.problem_size,
        b.input_seed,
        false,
    )?)
}

const TABLE: &str = include_str!("../calibration/work/builtin.toml");

#[derive(serde::Deserialize, serde::Serialize)]
struct Table {
    /// The NVRTC (major.minor) whose PTX the FLOPs and bytes were counted from: another version
    /// may emit another instruction mix, so the test compares exactly only with this one.
    nvrtc: String,
    kernels: std::collections::BTreeMap<String, StaticWork>,
}

/// The virtual architecture the built-in suite's PTX is counted for: Hopper's, the part the
/// committed hardware data come from. The instruction mix barely depends on it.
const PTX_ARCH: u32 = 90;

/// Static work of a built-in kernel's timed launch (from the committed table): the geometry of
/// the launch and its buffers' footprint as its working set, from its launch plan; FLOPs, global
/// bytes and static shared memory from its PTX ([`from_plan_and_ptx`]).
pub fn builtin(kernel: &str) -> anyhow::Result<StaticWork> {
    builtin_suite().remove(kernel).with_context(|| {
        format!(
            "no built-in kernel `{kernel}`; accepted: {}",
            kernels::BUILTIN_NAMES.join(", ")
        )
    })
}

/// Static work of every built-in kernel, by name.
pub fn builtin_suite() -> std::collections::BTreeMap<String, StaticWork> {
    toml::from_str::<Table>(TABLE)
        .expect("calibration/work/builtin.toml parses (checked by a test)")
        .kernels
}

/// A built-in kernel's launch from its plan alone (slow: it builds the kernel's inputs): its
/// geometry, and its buffers' footprint as the bytes it moves (each byte once) and as its working
/// set. FLOPs are unknown (0).
pub fn from_plan(kernel: &str) -> anyhow::Result<StaticWork> {
    let plan = plan_of(kernel)?;
    let bytes = footprint(&plan);
    Ok(StaticWork {
        blocks: u64::from(plan.step.blocks()),
        threads_per_block: plan.step.threads_per_block(),
        regs_per_thread: 0,
        shared_per_block: 0,
        flops: 0.0,
        bytes,
        working_set: bytes,
        basis: format!(
            "launch plan of `{}` ({} blocks of {} threads, {:.1} MB of buffers read once); no PTX, so FLOPs unknown",
            plan.step.entry,
            plan.step.blocks(),
            plan.step.threads_per_block(),
            bytes / 1e6
        ),
    })
}

/// Static work of a built-in kernel's timed launch from `ptx`: the instruction mix of one thread
/// of the plan's entry times the threads of the launch, the working set from the plan's buffers.
/// `regs_per_thread` comes from the compiled module when it is known (0 if not).
pub fn from_ptx(kernel: &str, ptx: &str, regs_per_thread: u32) -> anyhow::Result<StaticWork> {
    let plan = plan_of(kernel)?;
    let launch = Launch {
        entry: plan.step.entry,
        blocks: u64::from(plan.step.blocks()),
        threads_per_block: plan.step.threads_per_block(),
        regs_per_thread,
    };
    from_ptx_launch(ptx, &launch, footprint(&plan))
}

/// A built-in kernel's PTX for [`PTX_ARCH`], compiled by the NVRTC at hand, and its version.
pub fn builtin_ptx(kernel: &str) -> anyhow::Result<(String, (u32, u32))> {
    let spec = kernels::find(kernel).with_context(|| format!("no built-in kernel `{kernel}`"))?;
    let source = spec
        .builtin()
        .context("the built-in suite has bodies")?
        .source;
    let (version, _) = nvrtc::version()?;
    match nvrtc::compile(&spec.name, source, nvrtc::Target::Ptx(PTX_ARCH))? {
        nvrtc::Image::Ptx(ptx) => Ok((ptx, version)),
        nvrtc::Image::Cubin(_) => unreachable!("NVRTC was asked for PTX"),
    }
}

/// What the committed table holds for a built-in kernel: [`from_ptx`] on the PTX the NVRTC at
/// hand compiles, labelled with its version (slow: builds the inputs and compiles).
pub fn from_plan_and_ptx(kernel: &str) -> anyhow::Result<StaticWork> {
    let (ptx, (major, minor)) = builtin_ptx(kernel)?;
    let mut work = from_ptx(kernel, &ptx, 0)?;
    work.basis = format!(
        "launch plan and NVRTC {major}.{minor} compute_{PTX_ARCH} {}; working set {:.1} MB of buffers",
        work.basis,
        work.working_set / 1e6
    );
    Ok(work)
}

/// One launch's geometry, as a manifest or a plan gives it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Launch<'a> {
    pub entry: &'a str,
    pub blocks: u64,
    pub threads_per_block: u32,
    /// 0 when unknown.
    pub regs_per_thread: u32,
}

/// Static work of any launch (a manifest kernel's too) from its module's PTX and the bytes of the
/// buffers it is given.
pub fn from_ptx_launch(ptx: &str, launch: &Launch, working_set: f64) -> anyhow::Result<StaticWork> {
    let f: PtxFeatures = crate::model::predict::ptx::features(ptx, launch.entry)?;
    let threads = launch.blocks as f64 * f64::from(launch.threads_per_block);
    let loops = if f.loops {
        "; has loops, counted once: a lower estimate"
    } else {
        ""
    };
    Ok(StaticWork {
        blocks: launch.blocks,
        threads_per_block: launch.threads_per_block,
        regs_per_thread: launch.regs_per_thread,
        shared_per_block: u32::try_from(f.static_shared_bytes).unwrap_or(u32::MAX),
        flops: f.flops_per_thread * threads,
        bytes: f.global_bytes_per_thread * threads,
        working_set,
        basis: format!(
            "PTX of `{}`: {:.0} FLOPs and {:.0} global bytes per thread x {threads:.0} threads{loops}",
            f.entry, f.flops_per_thread, f.global_bytes_per_thread
        ),
    })
}

/// Static work of a manifest kernel's launch: its grid and block, its buffers as its working set,
/// and FLOPs and global bytes from the entry's instruction mix times the threads of the grid when
/// there is PTX to count: the module's own, or what NVRTC (no GPU needed) compiles from a CUDA C
/// module where it can be loaded here. A CUBIN or fatbin module gives no instruction mix on the
/// host (no disassembler), nor does CUDA C without NVRTC, so its buffers read once stand for the
/// bytes and FLOPs are unknown: a memory roofline and launch overhead. The module is read again,
/// and refused if it is no longer the one the manifest was loaded with (the kernel is then stale
/// until a reload).
pub fn from_manifest(m: &Manifest) -> anyhow::Result<StaticWork> {
    let blocks: u64 = m.grid.iter().map(|&g| u64::from(g)).product();
    let threads_per_block: u32 = m.block.iter().product();
    let buffers: f64 = m
        .args
        .iter()
        .filter_map(|a| match a {
            crate::manifest::Arg::Buffer { bytes, .. } => Some(*bytes as f64),
            _ => None,
        })
        .sum();
    let (ptx, from) = match manifest_ptx(m)? {
        Ok(counted) => counted,
        Err(why_not) => return Ok(StaticWork {
            blocks,
            threads_per_block,
            regs_per_thread: 0,
            shared_per_block: m.shared_bytes,
            flops: 0.0,
            bytes: buffers,
            working_set: buffers,
            basis: format!(
                "manifest {} ({blocks} blocks of {threads_per_block} threads, {:.1} MB of buffers read once); its module is {why_not}, so FLOPs unknown",
                m.path.display(),
                buffers / 1e6,
            ),
        }),
    };
    let launch = Launch {
        entry: &m.entry,
        blocks,
        threads_per_block,
        regs_per_thread: 0,
    };
    let mut work = from_ptx_launch(&ptx, &launch, buffers)?;
    // Dynamic shared memory is the manifest's, on top of what the PTX declares.
    work.shared_per_block = work.shared_per_block.saturating_add(m.shared_bytes);
    work.basis = format!("manifest {}, {from}{}", m.path.display(), work.basis);
    Ok(work)
}

/// The PTX of a manifest's module, and what it came from ("" for PTX as given); or why there
/// is none to count (a CUBIN or fatbin, or CUDA C that no NVRTC here compiles). An error where
/// the module is no longer the one the manifest was loaded with.
fn manifest_ptx(m: &Manifest) -> anyhow::Result<Result<(String, String), String>> {
    let compiled = match m.module_kind {
        ModuleKind::Ptx => false,
        ModuleKind::Cu if nvrtc::available() => true,
        ModuleKind::Cu => {
            return Ok(Err(
                "CUDA C and no NVRTC could be loaded here to compile it".into(),
            ))
        }
        ModuleKind::Cubin => return Ok(Err("a CUBIN, not PTX".into())),
        _ => return Ok(Err("a fatbin, not PTX".into())),
    };
    let bytes = crate::manifest::read_module(&m.module).map_err(|e| anyhow::anyhow!(e))?;
    use sha2::Digest;
    let digest: String = sha2::Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    anyhow::ensure!(
        digest == m.module_sha256,
        "module {} changed since the manifest was loaded; reload the kernels",
        m.module.display()
    );
    let text = String::from_utf8_lossy(&bytes).into_owned();
    if !compiled {
        return Ok(Ok((text, String::new())));
    }
    // Compiled once per module text: forecasts are remade at every reload and for every GPU,
    // and 40 small CUDA C manifests took a reload from 6 ms to 0.66 s.
    type Compiled = Result<(String, String), String>;
    static COMPILED: std::sync::Mutex<std::collections::BTreeMap<String, Compiled>> =
        std::sync::Mutex::new(std::collections::BTreeMap::new());
    let key = format!("{} {digest}", m.name);
    let mut compiled = COMPILED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(done) = compiled.get(&key) {
        return Ok(done.clone());
    }
    let done = compile_manifest(&m.name, &text)?;
    compiled.insert(key, done.clone());
    Ok(done)
}

/// A CUDA C manifest module compiled to PTX, or why it was not.
fn compile_manifest(name: &str, text: &str) -> anyhow::Result<Result<(String, String), String>> {
    let ((major, minor), _) = nvrtc::version()?;
    // A module that does not compile here (a header beside it, options the device's compile
    // adds) is predicted from its buffers, as without NVRTC, and its label says why.
    match nvrtc::compile(name, text, nvrtc::Target::Ptx(PTX_ARCH)) {
        Ok(nvrtc::Image::Ptx(ptx)) => Ok(Ok((
            ptx,
            format!("CUDA C compiled by NVRTC {major}.{minor} for compute_{PTX_ARCH}: "),
        ))),
        Ok(nvrtc::Image::Cubin(_)) => unreachable!("NVRTC was asked for PTX"),
        Err(e) => {
            let first = e.to_string().lines().next().unwrap_or_default().to_string();
            Ok(Err(format!(
                "CUDA C that NVRTC {major}.{minor} did not compile here ({first})"
            )))
        }
    }
}

/// Predicted typical curves of the kernels of a catalogue whose static work is known, for one
/// device description and the daemon's partition sizes: computed when the catalogue is loaded
/// (at start and at every reload), not per query. The service reports them beside bounds;
/// nothing computes a bound from them.
#[derive(Debug, Clone, Default)]
pub struct Forecast {
    description: Option<crate::model::predict::DeviceDescription>,
    sizes: Vec<u32>,
    /// Per kernel: its curve and label, or why it has none.
    curves: std::collections::BTreeMap<
        String,
        Result<(crate::model::predict::PredictedCurve, String), String>,
    >,
}

impl Forecast {
    /// No description: no predictions.
    pub fn new(
        description: Option<&crate::model::predict::DeviceDescription>,
        sizes: &[u32],
        catalogue: &Catalogue,
    ) -> Forecast {
        Forecast {
            description: description.cloned(),
            sizes: sizes.to_vec(),
            curves: Default::default(),
        }
        .for_catalogue(catalogue)
    }

    /// The same description and sizes, for the kernels of `catalogue` (after a reload).
    pub fn for_catalogue(&self, catalogue: &Catalogue) -> Forecast {
        let mut next = Forecast {
            description: self.description.clone(),
            sizes: self.sizes.clone(),
            curves: Default::default(),
        };
        let Some(d) = &self.description else {
            return next;
        };
        let builtins = builtin_suite();
        for k in catalogue.iter() {
            let work = match &k.body {
                KernelBody::Builtin(_) => builtins.get(&k.name).cloned().ok_or_else(|| {
                    format!("`{}` is missing from calibration/work/builtin.toml", k.name)
                }),
                KernelBody::Manifest(m) => from_manifest(m).map_err(|e| format!("{e:#}")),
                KernelBody::Simulated => continue,
            };
            let curve = work.map(|work| {
                let label = format!(
                    "a prediction of the typical time, never a bound: roofline on {} from the {}",
                    d.name, work.basis
                );
                (
                    crate::model::predict::partition_curve(&work, d, &self.sizes),
                    label,
                )
            });
            next.curves.insert(k.name.clone(), curve);
        }
        next
    }

    /// The predicted typical time (ns) of `kernel` on `sms` SMs and its label; 0 and a label
    /// that starts with `none:` and says why where there is no prediction.
    pub fn at(&self, kernel: &str, sms: u32) -> (u64, String) {
        match self.curve(kernel) {
            Ok((curve, label)) => match curve.at(sms) {
                Some(t) => (t.round() as u64, label.clone()),
                None => (
                    0,
                    format!("none: {sms} SMs is not a partition size predicted for"),
                ),
            },
            Err(why) => (0, why),
        }
    }

    /// The predicted curve of `kernel` at every partition size and its label, or why there is
    /// none (a label that starts with `none:`).
    pub fn curve(
        &self,
        kernel: &str,
    ) -> Result<(&crate::model::predict::PredictedCurve, &String), String> {
        if self.description.is_none() {
            return Err("none: prediction is off (wcetd --no-prediction) or no device description matched this device (wcetd --device-description)".into());
        }
        match self.curves.get(kernel) {
            Some(Ok((curve, label))) => Ok((curve, label)),
            Some(Err(why)) => Err(format!("none: the static work of `{kernel}` is not known: {why}")),
            None => Err(format!("none: no static work is known for `{kernel}`: the daemon has no code for it (imported samples, or a simulated profile's shape)")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed table is what the plans give (always checked) and what the PTX gives
    /// (checked where NVRTC can be loaded, exactly when it is the version the table names);
    /// `WCETD_REGENERATE=1` rewrites it, which needs NVRTC.
    #[test]
    fn the_committed_table_matches_the_launch_plans_and_the_ptx() {
        if std::env::var_os("WCETD_REGENERATE").is_some() {
            return regenerate_the_table();
        }
        let table: Table = toml::from_str(TABLE).unwrap();
        let mut names: Vec<String> = kernels::BUILTIN_NAMES
            .iter()
            .map(|k| k.to_string())
            .collect();
        names.sort_unstable();
        assert_eq!(table.kernels.keys().cloned().collect::<Vec<_>>(), names);
        // Building a plan generates its inputs (minutes for the suite in a debug build): each
        // is built once, with its PTX counted where NVRTC can be loaded.
        let fresh = nvrtc::available().then(counted_table);
        for (k, w) in &table.kernels {
            let plan = match &fresh {
                Some(fresh) => fresh.kernels[k].clone(),
                None => from_plan(k).unwrap(),
            };
            assert_eq!(
                (w.blocks, w.threads_per_block, w.working_set),
                (plan.blocks, plan.threads_per_block, plan.working_set),
                "{k}: calibration/work/builtin.toml is out of date with the launch plan"
            );
            assert!(w.bytes > 0.0, "{k}: {w:?}");
            assert!(
                w.basis.contains(&format!("NVRTC {}", table.nvrtc)),
                "{k}: {}",
                w.basis
            );
        }
        assert!(builtin("nope")
            .unwrap_err()
            .to_string()
            .contains("accepted: needle"));
        let Some(fresh) = fresh else {
            eprintln!("libnvrtc not found; the table's PTX figures are not re-counted");
            return;
        };
        if fresh.nvrtc != table.nvrtc {
            eprintln!(
                "NVRTC {} here, the table was counted with {}: PTX figures not compared",
                fresh.nvrtc, table.nvrtc
            );
            return;
        }
        assert!(
            fresh.kernels == table.kernels,
            "calibration/work/builtin.toml is out of date with the PTX; rewrite it with WCETD_REGENERATE=1 cargo test --lib workload"
        );
    }

    /// The table as the plans and the NVRTC at hand give it.
    fn counted_table() -> Table {
        let ((major, minor), _) = nvrtc::version().unwrap();
        Table {
            nvrtc: format!("{major}.{minor}"),
            kernels: kernels::BUILTIN_NAMES
                .iter()
                .map(|k| (k.to_string(), from_plan_and_ptx(k).unwrap()))
                .collect(),
        }
    }

    fn regenerate_the_table() {
        assert!(
            nvrtc::available(),
            "regenerating the table needs NVRTC: pip install nvidia-cuda-nvrtc and set WCETD_NVRTC to its libnvrtc.so.13"
        );
        let text = format!(
            "# Static work of the built-in kernels' timed launches, from their launch plans and their PTX\n# (src/workload.rs; regenerate with WCETD_REGENERATE=1 cargo test --lib workload, with NVRTC).\n\n{}",
            toml::to_string(&counted_table()).unwrap()
        );
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/calibration/work/builtin.toml");
        std::fs::write(path, text).unwrap();
        eprintln!("rewrote {path}; run the test again to check it");
    }

    #[test]
    fn ptx_counts_times_the_grid_give_the_work() {
        let ptx = ".visible .entry k(\n.param .u64 p\n)\n{\n\tld.global.f32 \t%f1, [%rd1];\n\tfma.rn.f32 \t%f2, %f1, %f1, %f1;\n\tst.global.f32 \t[%rd1], %f2;\n\tret;\n}\n";
        let launch = Launch {
            entry: "k",
            blocks: 10,
            threads_per_block: 128,
            regs_per_thread: 8,
        };
        let w = from_ptx_launch(ptx, &launch, 1e6).unwrap();
        assert_eq!((w.flops, w.bytes, w.working_set), (2560.0, 10240.0, 1e6));
        assert!(w.basis.contains("PTX of `k`"), "{}", w.basis);
        let e = from_ptx_launch(
            ptx,
            &Launch {
                entry: "j",
                ..launch
            },
            1e6,
        )
        .unwrap_err();
        assert!(e.to_string().contains("entries found: k"), "{e}");
    }

    /// A manifest's static work: the PTX's mix times the grid, the manifest's dynamic shared
    /// memory added; a CUDA C module's is its compiled PTX's where NVRTC can be loaded, else its buffers alone, and says so; a PTX module replaced
    /// since the manifest was loaded is refused rather than predicted as the code it no longer is.
    #[test]
    fn a_manifest_is_predicted_from_its_ptx_or_its_buffers() {
        let dir = tempfile::tempdir().unwrap();
        let ptx = ".visible .entry k(\n.param .u64 p\n)\n{\n\tld.global.f32 \t%f1, [%rd1];\n\tfma.rn.f32 \t%f2, %f1, %f1, %f1;\n\tst.global.f32 \t[%rd1], %f2;\n\tret;\n}\n";
        std::fs::write(dir.path().join("k.ptx"), ptx).unwrap();
        std::fs::write(
            dir.path().join("k.cu"),
            "extern \"C\" __global__ void k(float *p) { p[0] = p[0] * 3.0f + 1.0f; }\n",
        )
        .unwrap();
        let manifest = |module: &str| {
            let path = dir.path().join(format!("{module}.toml"));
            let text = format!("name = \"app.k\"\nmodule = \"{module}\"\nentry = \"k\"\ngrid = [10, 2, 1]\nblock = [64, 2, 1]\nshared_bytes = 1024\nargs = [{{ buffer = 1000000, fill = \"zero\" }}]\n");
            crate::manifest::parse(&path, &text).unwrap()
        };
        let w = from_manifest(&manifest("k.ptx")).unwrap();
        assert_eq!((w.blocks, w.threads_per_block), (20, 128));
        assert_eq!((w.flops, w.bytes, w.working_set), (5120.0, 20480.0, 1e6));
        assert_eq!(w.shared_per_block, 1024);
        assert!(w.basis.contains("PTX of `k`"), "{}", w.basis);
        let w = from_manifest(&manifest("k.cu")).unwrap();
        if nvrtc::available() {
            // Compiled here: one load, one fused multiply-add and one store per thread.
            assert_eq!((w.flops, w.bytes, w.working_set), (5120.0, 20480.0, 1e6));
            assert!(w.basis.contains("CUDA C compiled by NVRTC"), "{}", w.basis);
        } else {
            assert_eq!((w.flops, w.bytes, w.working_set), (0.0, 1e6, 1e6));
            assert!(w.basis.contains("CUDA C and no NVRTC"), "{}", w.basis);
        }
        // CUDA C that does not compile here is predicted from its buffers, and says why.
        std::fs::write(
            dir.path().join("h.cu"),
            "#include \"beside.h\"\nextern \"C\" __global__ void k(float *p) {}\n",
        )
        .unwrap();
        let w = from_manifest(&manifest("h.cu")).unwrap();
        assert_eq!((w.flops, w.bytes, w.working_set), (0.0, 1e6, 1e6));
        let why = ["did not compile here", "no NVRTC"][usize::from(!nvrtc::available())];
        assert!(w.basis.contains(why), "{}", w.basis);
        let loaded = manifest("k.ptx");
        std::fs::write(dir.path().join("k.ptx"), ptx.replace("fma", "add")).unwrap();
        let e = format!("{:#}", from_manifest(&loaded).unwrap_err());
        assert!(e.contains("changed since the manifest was loaded"), "{e}");
    }
}
