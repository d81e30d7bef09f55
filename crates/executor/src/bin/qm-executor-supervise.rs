//! The supervisor of this crate's own tests: what `qm supervise` runs in the server, without
//! the `qm` binary (which this crate cannot build). Not installed: production has no second
//! binary.

fn main() {
    let zygote = std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(
            qm_executor::supervisor::zygote::ZYGOTE_ARG,
        ));
    std::process::exit(if zygote {
        qm_executor::supervisor::zygote::main()
    } else {
        qm_executor::supervisor::main()
    });
}
