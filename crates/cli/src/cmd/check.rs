//! `qm check FILE...`: play scenario files and report PASS / FAIL per scenario.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use qm_cli::{check, scenario, Error};

/// Exit code when every scenario passed.
const ALL_PASSED: u8 = 0;
/// Exit code when at least one scenario failed.
const SOME_FAILED: u8 = 1;
/// Exit code when at least one file could not be read or parsed.
const MALFORMED: u8 = 2;

/// Arguments of `qm check`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Scenario files (YAML, several documents allowed, or JSON), or folders whose .yaml,
    /// .yml and .json files are all checked.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Print every step, the effects it caused, and at each `expect` the state found.
    #[arg(short, long)]
    verbose: bool,
}

/// Checks every file, prints the report to stdout and file errors to stderr.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    let (mut passed, mut failed, mut malformed) = (0usize, 0usize, 0usize);
    for path in expand(&args.files, &mut malformed) {
        let scenarios = match scenario::load(&path) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: {e}");
                malformed += 1;
                continue;
            }
        };
        for sc in &scenarios {
            let outcome = check::run(sc, args.verbose);
            if args.verbose {
                writeln!(out, "{}: {}", path.display(), sc.name)?;
                for line in &outcome.trace {
                    writeln!(out, "  {line}")?;
                }
            }
            match &outcome.failure {
                None => {
                    passed += 1;
                    writeln!(out, "PASS {}: {}", path.display(), sc.name)?;
                }
                Some(failure) => {
                    failed += 1;
                    writeln!(out, "FAIL {}: {}", path.display(), sc.name)?;
                    for line in failure.to_string().lines() {
                        writeln!(out, "  {line}")?;
                    }
                }
            }
        }
    }
    writeln!(out, "{passed} passed, {failed} failed").context("writing the report")?;
    out.flush().context("writing the report")?;
    Ok(ExitCode::from(if malformed > 0 {
        eprintln!("{malformed} file(s) could not be checked");
        MALFORMED
    } else if failed > 0 {
        SOME_FAILED
    } else {
        ALL_PASSED
    }))
}

/// The files to check: each file as given, each folder's scenario files in name order. A
/// folder that cannot be read or holds no scenario file counts as malformed.
fn expand(paths: &[PathBuf], malformed: &mut usize) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for path in paths {
        if !path.is_dir() {
            files.push(path.clone());
            continue;
        }
        let found = scenario::files_in(path).and_then(|found| {
            if found.is_empty() {
                Err(Error::EmptyFolder { path: path.clone() })
            } else {
                Ok(found)
            }
        });
        match found {
            Ok(found) => files.extend(found),
            Err(e) => {
                eprintln!("error: {e}");
                *malformed += 1;
            }
        }
    }
    files
}
