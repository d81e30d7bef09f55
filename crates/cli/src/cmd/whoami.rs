//! `qm whoami`: which principal the server takes this client's key for, its groups and
//! whether it is an admin — the quick check that `qm` found the credentials meant.
//!
//! Exit codes: 0 on success, 1 when the server refuses or cannot be reached.

use std::process::ExitCode;

use clap::Args;
use qm_cli::client::principal::whoami_text;

use super::client::{exit_code, print_json, Common, Output};

/// `qm whoami`.
#[derive(Debug, Args)]
pub struct WhoamiArgs {
    #[command(flatten)]
    common: Common,
}

/// Runs `qm whoami`.
pub fn run(args: WhoamiArgs) -> anyhow::Result<ExitCode> {
    exit_code((|| {
        let me = args.common.client()?.whoami()?;
        match args.common.output() {
            Output::Table => print!("{}", whoami_text(&me)),
            Output::Json => print_json(&me)?,
        }
        Ok(())
    })())
}
