//! Static work of the kernels the daemon knows, for predictions made before (or instead of)
//! measuring: the launch geometry of each built-in kernel's timed step and the buffers it is
//! given, from the suite's launch plans (pure host code in the CUDA backend's `suite`, no GPU),
//! and FLOPs and bytes from a kernel's PTX ([`from_ptx`]; not called by the daemon yet: the
//! backend compiles cubins, not PTX, for the architectures it lists). Sits above the GPU layer,
//! whose plans it reads, and below the service: the model's predictor reads the [`StaticWork`]
//! this makes and knows nothing of where it came from.
//!
//! Building a plan generates the kernel's inputs (seconds for the whole suite), so the plans'
//! figures are committed in `calibration/work/builtin.toml` and read from there; a test rebuilds
//! them from the plans and fails when the file is out of date.

use anyhow::Context;

use crate::gpu::cuda::suite::{self, Arg, Plan};
use crate::kernels;
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
    kernels: std::collections::BTreeMap<String, StaticWork>,
}

/// Static work of a built-in kernel's timed launch without its PTX (from the committed table):
/// the geometry of the launch, and its buffers' footprint as the bytes it moves (each byte once)
/// and as its working set. FLOPs are unknown (0), so a prediction from this is a memory roofline
/// and launch overhead only.
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

/// [`builtin`], computed from the launch plan (slow: it builds the kernel's inputs).
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

/// Static work of a built-in kernel's timed launch from the PTX the CUDA backend compiled: the
/// instruction mix of one thread times the threads of the launch. For the integrator to call with
/// the backend's PTX; `regs_per_thread` comes from the compiled module when it is known (0 if not).
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

/// Predicted typical curves of the kernels whose static work is known, for one device
/// description and the daemon's partition sizes, computed once at start. The service reports them
/// beside bounds; nothing computes a bound from them.
#[derive(Debug, Clone, Default)]
pub struct Forecast {
    curves: std::collections::BTreeMap<String, (crate::model::predict::PredictedCurve, String)>,
}

impl Forecast {
    /// No description: no predictions.
    pub fn new(
        description: Option<&crate::model::predict::DeviceDescription>,
        sizes: &[u32],
    ) -> Forecast {
        let Some(d) = description else {
            return Forecast::default();
        };
        let curves = builtin_suite()
            .into_iter()
            .map(|(kernel, work)| {
                let label = format!(
                    "a prediction of the typical time, never a bound: roofline on {} from the {}",
                    d.name, work.basis
                );
                let curve = crate::model::predict::partition_curve(&work, d, sizes);
                (kernel, (curve, label))
            })
            .collect();
        Forecast { curves }
    }

    /// The predicted typical time (ns) of `kernel` on `sms` SMs and its label.
    pub fn at(&self, kernel: &str, sms: u32) -> Option<(u64, String)> {
        let (curve, label) = self.curves.get(kernel)?;
        Some((curve.at(sms)?.round() as u64, label.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed table is what the plans give; `WCETD_REGENERATE=1` rewrites it.
    #[test]
    fn the_committed_table_matches_the_launch_plans() {
        let kernels: std::collections::BTreeMap<String, StaticWork> = kernels::BUILTIN_NAMES
            .iter()
            .map(|k| (k.to_string(), from_plan(k).unwrap()))
            .collect();
        let text = format!(
            "# Static work of the built-in kernels' timed launches, from their launch plans\n# (src/workload.rs; regenerate with WCETD_REGENERATE=1 cargo test --lib workload).\n\n{}",
            toml::to_string(&Table { kernels: kernels.clone() }).unwrap()
        );
        if std::env::var_os("WCETD_REGENERATE").is_some() {
            std::fs::write(
                concat!(env!("CARGO_MANIFEST_DIR"), "/calibration/work/builtin.toml"),
                &text,
            )
            .unwrap();
        }
        assert_eq!(
            builtin_suite(),
            kernels,
            "calibration/work/builtin.toml is out of date; rewrite it with WCETD_REGENERATE=1 cargo test --lib workload"
        );
        for (k, w) in &kernels {
            assert!(
                w.blocks > 0 && w.threads_per_block > 0 && w.bytes > 0.0,
                "{k}: {w:?}"
            );
        }
        let e = builtin("nope").unwrap_err().to_string();
        assert!(e.contains("accepted: needle"), "{e}");
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
}
