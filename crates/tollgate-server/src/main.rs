//! The `tollgate` binary.

fn main() {}
