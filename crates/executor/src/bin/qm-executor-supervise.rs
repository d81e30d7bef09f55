//! The supervisor of this crate's own tests: what `qm supervise` runs in the server, without
//! the `qm` binary (which this crate cannot build). Not installed: production has no second
//! binary.

fn main() {
    std::process::exit(qm_executor::supervisor::main());
}
