//! `qm supervise`: the supervisor of one local attempt. Only `qm serve` starts it, with the
//! attempt's listening socket as standard input (`qm_executor::supervisor`); it is not meant to
//! be run by hand, and says so when it is.

use std::process::ExitCode;

/// Runs the supervisor; its messages go to standard error, the server's (so they are in the
/// server's log, each under a `supervisor{attempt=N}` span), filtered by `QM_LOG` as the
/// server's are.
pub fn run() -> ExitCode {
    if std::env::args_os().nth(2).is_some() {
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
    ExitCode::from(qm_executor::supervisor::main().clamp(0, 255) as u8)
}
