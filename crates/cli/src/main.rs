//! The `qm` binary.
fn main() {}
