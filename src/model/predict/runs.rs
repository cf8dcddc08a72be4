//! The gpu-perf CSV (RUNS and CONFIGS of `wcetctl project`): one row per kernel configuration,
//! with its launch, its static work counts, the device it ran on and (in RUNS) what was measured.
//! Readers refuse a malformed file whole, naming the line, the column and what is accepted.

use std::io::Read;

use super::device::{DeviceDescription, DeviceError};

/// One kernel configuration: what a prediction may read.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub kernel: String,
    pub n: u64,
    pub rows: u64,
    pub cols: u64,
    pub regs: u32,
    pub shmem: u32,
    pub block: u32,
    pub grid_blocks: u64,
    pub iters: u32,
    pub flops: f64,
    pub bytes: f64,
    pub working_set: f64,
}

impl Config {
    /// The key the design notes fix: (kernel, N, rows, cols).
    pub fn key(&self) -> (String, u64, u64, u64) {
        (self.kernel.clone(), self.n, self.rows, self.cols)
    }

    /// The problem size: N, or rows x cols.
    pub fn size(&self) -> u64 {
        if self.n > 0 {
            self.n
        } else {
            self.rows * self.cols
        }
    }

    pub fn threads(&self) -> f64 {
        self.grid_blocks as f64 * f64::from(self.block)
    }

    /// What an SM spends its time on, in units that scale with the problem: counted FLOPs, or
    /// thread-iterations for kernels without any (copies, atomics, histograms).
    pub fn work(&self) -> f64 {
        if self.flops > 0.0 {
            self.flops
        } else {
            self.threads() * f64::from(self.iters.max(1))
        }
    }
}

/// A configuration that ran: the device and what was measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub config: Config,
    pub device: DeviceDescription,
    pub mean_ms: f64,
    /// Standard deviation over the row's trials, when the file has it.
    pub std_ms: Option<f64>,
}

#[derive(Debug, thiserror::Error)]
pub enum RunsError {
    #[error("{what}: missing column `{column}`; required: {required}")]
    MissingColumn {
        what: String,
        column: &'static str,
        required: &'static str,
    },
    #[error("{what}, line {line}: `{column}` is `{value}`; accepted: {accepted}")]
    BadValue {
        what: String,
        line: u64,
        column: &'static str,
        value: String,
        accepted: &'static str,
    },
    #[error("{what}, line {line}: {detail}; accepted: a CSV file whose header names {required}")]
    Malformed {
        what: String,
        line: u64,
        detail: String,
        required: &'static str,
    },
    #[error("{what}: no rows after the header")]
    Empty { what: String },
}

const CONFIG_COLUMNS: &str = "kernel, N, rows, cols, block, grid_blocks, FLOPs, BYTES, working_set_bytes (regs, shmem, iters optional)";
const RUN_COLUMNS: &str = "the configuration columns, mean_ms, and the device columns gpu_device_name, gpu_cc_major, gpu_sms, gpu_max_threads_per_sm, gpu_max_blocks_per_sm, gpu_regs_per_sm, gpu_shared_mem_per_sm, gpu_l2_bytes, gpu_warp_size, calibrated_mem_bandwidth_gbps, calibrated_compute_gflops (std_ms optional)";

/// A CSV record with the column positions of its header, and where it came from.
struct Rec<'a> {
    what: &'a str,
    header: &'a csv::StringRecord,
    record: &'a csv::StringRecord,
    line: u64,
    required: &'static str,
}

impl Rec<'_> {
    fn raw(&self, column: &'static str) -> Result<Option<&str>, RunsError> {
        Ok(self
            .header
            .iter()
            .position(|h| h == column)
            .map(|i| self.record.get(i).unwrap_or("")))
    }

    fn text(&self, column: &'static str) -> Result<String, RunsError> {
        self.raw(column)?
            .map(str::to_string)
            .ok_or_else(|| RunsError::MissingColumn {
                what: self.what.to_string(),
                column,
                required: self.required,
            })
    }

    fn number(&self, column: &'static str, optional: bool) -> Result<f64, RunsError> {
        let value = match self.raw(column)? {
            None if optional => return Ok(0.0),
            None => {
                return Err(RunsError::MissingColumn {
                    what: self.what.to_string(),
                    column,
                    required: self.required,
                })
            }
            Some("") if optional => return Ok(0.0),
            Some(v) => v,
        };
        value
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| RunsError::BadValue {
                what: self.what.to_string(),
                line: self.line,
                column,
                value: value.to_string(),
                accepted: "a non-negative number",
            })
    }

    fn count<T: TryFrom<u64>>(&self, column: &'static str, optional: bool) -> Result<T, RunsError> {
        let v = self.number(column, optional)?;
        T::try_from(v as u64)
            .ok()
            .filter(|_| v.fract() == 0.0)
            .ok_or_else(|| RunsError::BadValue {
                what: self.what.to_string(),
                line: self.line,
                column,
                value: v.to_string(),
                accepted: "a whole number in range",
            })
    }

    fn config(&self) -> Result<Config, RunsError> {
        let kernel = self.text("kernel")?;
        if kernel.is_empty() {
            return Err(RunsError::BadValue {
                what: self.what.to_string(),
                line: self.line,
                column: "kernel",
                value: kernel,
                accepted: "a kernel name",
            });
        }
        Ok(Config {
            kernel,
            n: self.count("N", false)?,
            rows: self.count("rows", false)?,
            cols: self.count("cols", false)?,
            regs: self.count("regs", true)?,
            shmem: self.count("shmem", true)?,
            block: self.count("block", false)?,
            grid_blocks: self.count("grid_blocks", false)?,
            iters: self.count("iters", true)?,
            flops: self.at_most("FLOPs", MAX_WORK, "0 to 1e18 FLOPs per launch")?,
            bytes: self.at_most("BYTES", MAX_WORK, "0 to 1e18 bytes per launch")?,
            working_set: self.at_most("working_set_bytes", MAX_WORK, "0 to 1e18 bytes")?,
        })
    }

    /// A required count of work no launch comes near: above it is a typo or a unit mistake, and
    /// 1e300 FLOPs made a prediction of infinity.
    fn at_most(
        &self,
        column: &'static str,
        max: f64,
        accepted: &'static str,
    ) -> Result<f64, RunsError> {
        let v = self.number(column, false)?;
        if v > max {
            return Err(RunsError::BadValue {
                what: self.what.to_string(),
                line: self.line,
                column,
                value: format!("{v:e}"),
                accepted,
            });
        }
        Ok(v)
    }

    fn device(&self) -> Result<DeviceDescription, RunsError> {
        let d = DeviceDescription {
            name: self.text("gpu_device_name")?,
            sms: self.count("gpu_sms", false)?,
            cc: self.count("gpu_cc_major", false)?,
            max_threads_per_sm: self.count("gpu_max_threads_per_sm", false)?,
            max_blocks_per_sm: self.count("gpu_max_blocks_per_sm", false)?,
            regs_per_sm: self.count("gpu_regs_per_sm", false)?,
            shared_mem_per_sm: self.count("gpu_shared_mem_per_sm", false)?,
            l2_bytes: self.count("gpu_l2_bytes", false)?,
            warp_size: self.count("gpu_warp_size", false)?,
            mem_bandwidth_gbps: self.number("calibrated_mem_bandwidth_gbps", false)?,
            compute_gflops: self.number("calibrated_compute_gflops", false)?,
            l2_bandwidth_gbps: None,
            sm_bandwidth_gbps: None,
            launch_overhead_us: None,
        };
        // The ranges a device description is held to (`wcetctl predict --device`), named by
        // this file's columns.
        d.check(self.what).map_err(|e| match e {
            DeviceError::Invalid {
                field,
                value,
                accepted,
                ..
            } => RunsError::BadValue {
                what: self.what.to_string(),
                line: self.line,
                column: device_column(field),
                value,
                accepted,
            },
            other => RunsError::Malformed {
                what: self.what.to_string(),
                line: self.line,
                detail: other.to_string(),
                required: self.required,
            },
        })?;
        Ok(d)
    }
}

/// The most FLOPs or bytes one launch is taken to have: a petaFLOP/s GPU would need 1000 s.
const MAX_WORK: f64 = 1e18;

/// The column of this file that holds a device description's field.
fn device_column(field: &'static str) -> &'static str {
    match field {
        "name" => "gpu_device_name",
        "sms" => "gpu_sms",
        "cc" => "gpu_cc_major",
        "max_threads_per_sm" => "gpu_max_threads_per_sm",
        "max_blocks_per_sm" => "gpu_max_blocks_per_sm",
        "regs_per_sm" => "gpu_regs_per_sm",
        "shared_mem_per_sm" => "gpu_shared_mem_per_sm",
        "l2_bytes" => "gpu_l2_bytes",
        "warp_size" => "gpu_warp_size",
        "mem_bandwidth_gbps" => "calibrated_mem_bandwidth_gbps",
        "compute_gflops" => "calibrated_compute_gflops",
        other => other,
    }
}

fn read_records<T>(
    input: impl Read,
    what: &str,
    required: &'static str,
    mut row: impl FnMut(&Rec) -> Result<T, RunsError>,
) -> Result<Vec<T>, RunsError> {
    // Every line ending (CRLF, CR) read as LF, so that line numbers count right (`samples::csv_reader`).
    let mut reader = crate::samples::csv_reader(input);
    let header = reader
        .headers()
        .map_err(|e| RunsError::Malformed {
            what: what.to_string(),
            line: 1,
            detail: e.to_string(),
            required,
        })?
        .clone();
    let mut out = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| RunsError::Malformed {
            what: what.to_string(),
            line: e.position().map_or(0, |p| p.line()),
            detail: e.to_string(),
            required,
        })?;
        let line = record.position().map_or(0, |p| p.line());
        out.push(row(&Rec {
            what,
            header: &header,
            record: &record,
            line,
            required,
        })?);
    }
    if out.is_empty() {
        return Err(RunsError::Empty {
            what: what.to_string(),
        });
    }
    Ok(out)
}

/// Read CONFIGS: only the configuration columns are read; measured ones are ignored.
pub fn read_configs(input: impl Read, what: &str) -> Result<Vec<Config>, RunsError> {
    read_records(input, what, CONFIG_COLUMNS, |rec| rec.config())
}

/// Read RUNS: configurations with their device and measured mean.
pub fn read_runs(input: impl Read, what: &str) -> Result<Vec<Run>, RunsError> {
    read_records(input, what, RUN_COLUMNS, |rec| {
        let mean_ms = rec.number("mean_ms", false)?;
        if mean_ms <= 0.0 {
            return Err(RunsError::BadValue {
                what: what.to_string(),
                line: rec.line,
                column: "mean_ms",
                value: mean_ms.to_string(),
                accepted: "a positive time in milliseconds",
            });
        }
        let std_ms = rec
            .raw("std_ms")?
            .filter(|s| !s.is_empty())
            .map(|_| rec.number("std_ms", false))
            .transpose()?;
        Ok(Run {
            config: rec.config()?,
            device: rec.device()?,
            mean_ms,
            std_ms,
        })
    })
}

pub fn read_runs_file(path: &std::path::Path) -> anyhow::Result<Vec<Run>> {
    let file = std::fs::File::open(path)
        .map_err(|e| anyhow::anyhow!("opening {}: {e}", path.display()))?;
    Ok(read_runs(file, &path.display().to_string())?)
}

pub fn read_configs_file(path: &std::path::Path) -> anyhow::Result<Vec<Config>> {
    let file = std::fs::File::open(path)
        .map_err(|e| anyhow::anyhow!("opening {}: {e}", path.display()))?;
    Ok(read_configs(file, &path.display().to_string())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "kernel,regs,shmem,mean_ms,std_ms,N,rows,cols,iters,block,grid_blocks,FLOPs,BYTES,working_set_bytes,gpu_device_name,gpu_cc_major,gpu_sms,gpu_max_threads_per_sm,gpu_max_blocks_per_sm,gpu_regs_per_sm,gpu_shared_mem_per_sm,gpu_l2_bytes,gpu_warp_size,calibrated_mem_bandwidth_gbps,calibrated_compute_gflops";
    const ROW: &str = "saxpy,12,0,0.1,0.001,1024,0,0,0,256,4,2048,12288,12288,GPU,89,46,1536,24,65536,102400,37748736,32,446.98,17154.8";

    #[test]
    fn a_run_reads_config_device_and_measurement() {
        let runs = read_runs(format!("{HEADER}\n{ROW}\n").as_bytes(), "t").unwrap();
        assert_eq!(runs[0].config.key(), ("saxpy".into(), 1024, 0, 0));
        assert_eq!(runs[0].device.sms, 46);
        assert_eq!(runs[0].std_ms, Some(0.001));
        assert_eq!(runs[0].config.threads(), 1024.0);
    }

    #[test]
    fn configs_need_no_measured_column() {
        let text = "kernel,N,rows,cols,block,grid_blocks,FLOPs,BYTES,working_set_bytes\nk,0,64,64,256,16,0,32768,32768\n";
        let c = read_configs(text.as_bytes(), "c").unwrap();
        assert_eq!(c[0].size(), 4096);
    }

    #[test]
    fn errors_say_line_column_and_what_is_accepted() {
        let bad = ROW.replace(",256,4,", ",256,four,");
        let e = read_runs(format!("{HEADER}\n{bad}\n").as_bytes(), "r.csv")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 2") && e.contains("`grid_blocks`") && e.contains("accepted"),
            "{e}"
        );
        // Counts no launch or GPU has are refused as `wcetctl predict --device` refuses them
        // (they were read, and 1e300 FLOPs predicted infinity).
        for (from, to, column) in [
            (",2048,12288,", ",1e300,12288,", "`FLOPs` is `1e300`"),
            (",89,46,", ",89,0,", "`gpu_sms` is `0`"),
            (",446.98,", ",1e-300,", "`calibrated_mem_bandwidth_gbps`"),
        ] {
            let bad = ROW.replace(from, to);
            assert_ne!(bad, ROW);
            let e = read_runs(format!("{HEADER}\n{bad}\n").as_bytes(), "r.csv")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("line 2") && e.contains(column) && e.contains("accepted"),
                "{e}"
            );
        }
        let e = read_runs("kernel,N\nk,1\n".as_bytes(), "r.csv")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("missing column") && e.contains("required"),
            "{e}"
        );
        let e = read_runs(format!("{HEADER}\n").as_bytes(), "r.csv")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no rows"), "{e}");
    }

    /// A CRLF file (the shipped runs_4070.csv is one) names the line an LF file names.
    #[test]
    fn crlf_files_name_the_right_line() {
        let bad = ROW.replace(",256,4,", ",256,four,");
        let lf = format!("{HEADER}\n{ROW}\n{ROW}\n{ROW}\n{bad}\n");
        for text in [lf.clone(), lf.replace('\n', "\r\n")] {
            let e = read_runs(text.as_bytes(), "r.csv").unwrap_err().to_string();
            assert!(e.contains("line 5: `grid_blocks`"), "{e}");
        }
    }
}
