//! `qm serve`: the AWS Batch API server with durable state and the local executor.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

/// Arguments of `qm serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on [default: 127.0.0.1:7611].
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Where state (SQLite), job directories, logs and checkpoints live [default: ./qm-data].
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// TOML config file (region, account_id, `[executor]`, `[[executor.pool]]`, `[scheduler]`);
    /// flags win over it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Development only: accept unsigned requests, every one acting as the admin
    /// `anonymous`. Refused unless the listen address is loopback.
    #[arg(long)]
    no_auth: bool,
    /// Serve HTTPS with this PEM certificate chain (with --tls-key; or `[tls] cert`).
    #[arg(long, value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert (or `[tls] key`).
    #[arg(long, value_name = "FILE")]
    tls_key: Option<PathBuf>,
}

/// Colour in the server's log only on a terminal, and never under `NO_COLOR` (no-color.org):
/// escape codes make a log file hard to read and grep.
fn log_colour() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Starts the server and runs until SIGINT / SIGTERM.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("QM_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(log_colour())
        .init();
    let flags = qm_server::Flags {
        listen: args.listen,
        data_dir: args.data_dir,
        config: args.config,
        no_auth: args.no_auth,
        tls_cert: args.tls_cert,
        tls_key: args.tls_key,
    };
    let config = qm_server::Config::load(&flags)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("qm-http")
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(qm_server::serve(config, flags))?;
    Ok(ExitCode::SUCCESS)
}
