//! The fuzz targets' bodies; fuzz_targets/*.rs are one-line wrappers around these.
pub mod harness;
