//! Stamps the build with the commit it was built from (`QM_GIT_COMMIT`), which the store
//! records beside every batch it appends: recovery tells the batches of this very build, whose
//! decisions must replay exactly, from those of another build, whose rules may have changed.

use std::path::Path;
use std::process::Command;

fn main() {
    // A build from a source archive has no git: its packager may name the commit instead.
    let commit = std::env::var("QM_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| {
            let commit = git(&["rev-parse", "--short=12", "HEAD"])?;
            // Uncommitted changes to tracked files make a build no longer that commit's.
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some();
            Some(if dirty {
                format!("{commit}-dirty")
            } else {
                commit
            })
        })
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=QM_GIT_COMMIT={commit}");
    // Rebuild the stamp when HEAD moves: HEAD itself (a checkout) and the branch it names (a
    // commit). Outside a git checkout there is nothing to watch and the stamp is "unknown".
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let dir = Path::new(&dir);
        println!("cargo:rerun-if-changed={}", dir.join("HEAD").display());
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={}", dir.join(branch).display());
        }
        println!(
            "cargo:rerun-if-changed={}",
            dir.join("packed-refs").display()
        );
    }
    println!("cargo:rerun-if-env-changed=QM_GIT_COMMIT");
}

/// The trimmed output of a successful git command that printed something.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}
