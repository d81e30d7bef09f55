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
            // --no-optional-locks: a plain `git status` may rewrite .git/index.
            let dirty = git(&[
                "--no-optional-locks",
                "status",
                "--porcelain",
                "--untracked-files=no",
            ])
            .is_some();
            Some(if dirty {
                format!("{commit}-dirty")
            } else {
                commit
            })
        })
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=QM_GIT_COMMIT={commit}");
    // Rebuild the stamp when HEAD moves (HEAD itself on a checkout, the branch it names on a
    // commit) and when the sources that make the decisions change (the core's and the
    // server's: an edit there rebuilds this crate anyway, and "-dirty" must not miss it).
    // Only paths that exist: cargo takes a missing one as changed, and would rebuild this
    // crate on every run.
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let manifest = Path::new(&manifest);
    let mut watched = vec![manifest.join("src"), manifest.join("../core/src")];
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let dir = Path::new(&dir);
        watched.push(dir.join("HEAD"));
        watched.push(dir.join("packed-refs"));
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watched.push(dir.join(branch));
        }
    }
    for path in watched.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    println!("cargo:rerun-if-env-changed=QM_GIT_COMMIT");
}

/// The trimmed output of a successful git command that printed something.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}
