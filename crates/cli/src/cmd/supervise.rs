//! `qm supervise`: the supervisor of one local attempt. Only `qm serve` starts it, with the
//! attempt's listening socket as standard input (`qm_executor::supervisor`), or `qm supervise
//! zygote`, which supervisors are forked from; neither is meant to be run by hand, and `qm
//! supervise` says so when it is.

use std::process::ExitCode;

/// Runs the supervisor; its messages go to standard error, the server's (so they are in the
/// server's log, each under a `supervisor{attempt=N}` span), filtered by `QM_LOG` as the
/// server's are.
pub fn run() -> ExitCode {
    let arg = std::env::args_os().nth(2);
    let zygote = arg.as_deref()
        == Some(std::ffi::OsStr::new(
            qm_executor::supervisor::zygote::ZYGOTE_ARG,
        ));
    if (arg.is_some() && !zygote) || std::env::args_os().nth(3).is_some() {
        eprintln!("qm supervise takes no arguments: qm serve starts it for each attempt");
        return ExitCode::from(2);
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("QM_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let code = if zygote {
        // The supervisors it forks carry this subscriber on.
        qm_executor::supervisor::zygote::main()
    } else {
        qm_executor::supervisor::main()
    };
    ExitCode::from(code.clamp(0, 255) as u8)
}
