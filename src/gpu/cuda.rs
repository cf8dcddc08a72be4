//! The CUDA backend (placeholder until the CUDA backend lands).
