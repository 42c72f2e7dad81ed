//! Memory-store check benchmarks.
fn main() {}
