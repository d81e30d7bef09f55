//! The `qm` binary: argument parsing and one module per command under `cmd/`. The work is done
//! by the `qm_cli` library and the scheduling core; this file only dispatches and maps errors
//! to exit codes.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd;

/// Quartermaster: a GPU quota-share scheduler with the AWS Batch quota-management model.
#[derive(Debug, Parser)]
#[command(name = "qm", version = qm_server::VERSION, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Play policy scenario files through the scheduling core and check their expectations.
    ///
    /// Prints PASS or FAIL per scenario (with a diff for each failure) and a summary line.
    /// Exit code: 0 when every scenario passes, 1 when one fails, 2 when a file cannot be read
    /// or is malformed (the other files are still checked).
    Check(cmd::check::Args),
    /// Run the server: the AWS Batch quota-management API (point boto3 or the AWS CLI at it
    /// with endpoint_url), state in SQLite under --data-dir, attempts run as local processes.
    Serve(cmd::serve::Args),
    /// Copy a server's store (its SQLite log) into one checked file, while it runs or not.
    ///
    /// The copy is consistent (the log up to one batch, every batch whole) and only gets
    /// FILE's name once complete, checked and synced. Job logs and checkpoints are not in it.
    /// Restore: docs/server.md, "Backup and restore".
    Backup(cmd::backup::Args),
    /// Replay a workload through the scheduling core under several policies and compare them:
    /// completion time, waiting, preemptions, lost work, utilization. Writes metrics.json and a
    /// self-contained report.html to --out.
    Simulate(cmd::simulate::Args),
    /// Workload files for `qm simulate`.
    #[command(subcommand)]
    Workload(cmd::workload::Command),
    /// Talk to a running server: submit, list and inspect jobs, logs, explain, shares, watch.
    #[command(flatten)]
    Client(cmd::client::Command),
    /// Policy as code: plan, apply and audit a cluster file against a running server.
    #[command(flatten)]
    Policy(cmd::policy::Command),
    /// Reports from a running server's records: `qm report usage` for the quota review.
    #[command(subcommand)]
    Report(cmd::report::Command),
    /// Who may call the server: create, list, delete principals and rotate their keys
    /// (admins only).
    #[command(subcommand)]
    Principal(cmd::principal::Command),
    /// Show which principal the server takes this client's credentials for.
    Whoami(cmd::whoami::WhoamiArgs),
    /// Drain this server's executor (admins): nothing starts until `qm drain --cancel`;
    /// `--requeue` also stops the running attempts and queues them again, using no retry
    /// and no preemption. Stopping the server never stops jobs; this does.
    Drain(cmd::admin::DrainArgs),
    /// Make the server read its config file again (admins; SIGHUP does the same): pools,
    /// grace, retention, limits, storage and executor options apply at once or to new
    /// attempts; what takes a restart is refused, naming the keys, and nothing changes.
    Reload(cmd::admin::ReloadArgs),
}

/// An error and its causes, each cause only once: many of our messages already include their
/// cause, and repeating it (as `{:#}` would) makes them harder to read.
pub(crate) fn describe(e: &anyhow::Error) -> String {
    let mut msg = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !msg.contains(&c) {
            msg.push_str(": ");
            msg.push_str(&c);
        }
    }
    msg
}

/// Whether `e` is, somewhere in its chain, a write to a pipe whose reader is gone.
fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn main() -> ExitCode {
    // An attempt's supervisor, started by `qm serve` for every local attempt: dispatched
    // before anything else, so that it starts fast and holds little (docs/server.md).
    if std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new("supervise")) {
        return cmd::supervise::run();
    }
    // `qm ... | head` closes the pipe early: end quietly, as other command-line tools do,
    // instead of panicking in println!.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let broken_pipe = info
            .payload()
            .downcast_ref::<String>()
            .is_some_and(|m| m.contains("Broken pipe"));
        if broken_pipe {
            std::process::exit(141);
        }
        default_hook(info);
    }));
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check(args) => cmd::check::run(args),
        Command::Serve(args) => cmd::serve::run(args),
        Command::Backup(args) => cmd::backup::run(args),
        Command::Simulate(args) => cmd::simulate::run(args),
        Command::Workload(cmd) => cmd::workload::run(cmd),
        Command::Client(cmd) => cmd::client::run(cmd),
        Command::Policy(cmd) => cmd::policy::run(cmd),
        Command::Report(cmd) => cmd::report::run(cmd),
        Command::Principal(cmd) => cmd::principal::run(cmd),
        Command::Whoami(args) => cmd::whoami::run(args),
        Command::Drain(args) => cmd::admin::drain(args),
        Command::Reload(args) => cmd::admin::reload(args),
    };
    match result {
        Ok(code) => code,
        // `qm watch | head`: the reader went away; end as quietly as the panic hook does.
        Err(e) if broken_pipe(&e) => ExitCode::from(141),
        Err(e) => {
            eprintln!("error: {}", describe(&e));
            ExitCode::from(2)
        }
    }
}
