//! Predictions of a kernel's typical (mean) time where nothing was measured: on another GPU, at a
//! larger problem size, for a kernel never run. They are estimates for planning, never bounds: no
//! bound reads them, and everything that reports one labels it a prediction.
//!
//! Physically grounded: rooflines per memory level (L2 when the working set fits, DRAM otherwise),
//! occupancy and waves from the device's per-SM limits, and efficiency factors learned from the
//! measurements given. Knows nothing of the GPU backends or the bus.
//! - [`device`]: the device description of the design notes (TOML), and committed ones;
//! - [`runs`]: the gpu-perf CSV (RUNS and CONFIGS of `wcetctl project`);
//! - [`fit`]: efficiency factors from runs, predictions from them;
//! - [`curve`]: a predicted curve over partition sizes from a kernel's static work;
//! - [`ptx`]: static work from PTX text;
//! - [`study`]: the pre-registered experiments of `docs/prediction.md`.

pub mod curve;
pub mod device;
pub mod fit;
pub mod ptx;
pub mod runs;
pub mod study;

pub use curve::{partition_curve, PredictedCurve, StaticWork};
pub use device::DeviceDescription;
pub use fit::{Basis, Predictor};
pub use runs::{Config, Run};

/// The predicted mean time (ms) on `target` of every configuration in `configs`, from `source`
/// runs (all of one device), with how each was made. `wcetctl project` prints this.
pub fn project(
    source: &[Run],
    target: &DeviceDescription,
    configs: &[Config],
) -> Result<Vec<(Config, f64, Basis)>, fit::FitError> {
    let predictor = Predictor::fit(source)?;
    Ok(configs
        .iter()
        .map(|c| {
            let (ms, basis) = predictor.predict(c, target);
            (c.clone(), ms, basis)
        })
        .collect())
}

/// `project`'s output, as the design notes fix it: `kernel,N,rows,cols,predicted_ms`.
pub fn projection_csv(rows: &[(Config, f64, Basis)]) -> String {
    // Quoted where a field needs it (a kernel name with a comma), as the csv crate writes.
    let mut out = csv::Writer::from_writer(Vec::new());
    let header = ["kernel", "N", "rows", "cols", "predicted_ms"].map(String::from);
    let body = rows.iter().map(|(c, ms, _)| {
        [
            c.kernel.clone(),
            c.n.to_string(),
            c.rows.to_string(),
            c.cols.to_string(),
            format!("{ms:.6}"),
        ]
    });
    for row in std::iter::once(header).chain(body) {
        out.write_record(&row).expect("writing to memory");
    }
    String::from_utf8(out.into_inner().expect("writing to memory")).expect("UTF-8 fields")
}
