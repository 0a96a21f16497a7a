//! Kernel benchmarks for `kinema bench`.
