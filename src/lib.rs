pub mod gpu;
pub mod kernels;
