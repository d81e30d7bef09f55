//! End-to-end tests of `qm check`: the real binary on the workspace's scenarios, on a
//! deliberately failing scenario and on malformed files.
//!
//! The verbose report of the failing scenario is a golden file, `tests/golden/`; after an
//! intended change of the output, bless it with `QM_BLESS=1 cargo test -p qm-cli --test check`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh folder under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(test: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "qm-check-{}-{test}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("create a temp dir");
        TempDir(dir)
    }

    fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, contents).expect("write a scenario file");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn qm(args: &[&Path]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_qm"))
        .arg("check")
        .args(args)
        .output()
        .expect("run qm")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("utf-8 output")
}

const PASSING: &str = "name: one job runs on its own capacity
environment: {ml.g5.xlarge: 1}
shares:
  - {name: A, limits: {ml.g5.xlarge: 1}, strategy: RESERVE}
steps:
  - submit: {job: a, share: A, instance_type: ml.g5.xlarge}
  - expect: {running: [a], runnable: []}
";

const FAILING: &str = "name: the second job is expected to run, wrongly
environment: {ml.g5.xlarge: 1}
shares:
  - {name: A, limits: {ml.g5.xlarge: 1}, strategy: RESERVE}
steps:
  - submit: {job: a, share: A, instance_type: ml.g5.xlarge}
  - submit: {job: b, share: A, instance_type: ml.g5.xlarge}
  - expect:
      running: [b]
      runnable: [a]
      reason: {a: OWN_QUOTA_FULL, b: NOTHING_TO_BORROW}
  - finish: {job: a}
";

const MALFORMED: &str = "name: a typo in a share
environment: {ml.g5.xlarge: 1}
shares:
  - name: A
    limits: {ml.g5.xlarge: 1}
    strategy: LEND_AND_BORROW
    borow_limit: 100
steps: []
";

#[test]
fn every_scenario_in_the_workspace_scenarios_folder_passes() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a folder entry").path())
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("yaml" | "json")
            )
        })
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "{} holds no *.yaml or *.json scenario: the policy checks would silently check nothing",
        dir.display()
    );
    let args: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let out = qm(&args);
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{}",
        text(&out.stderr)
    );
    let mut expected = 0;
    for file in &files {
        let scenarios = qm_cli::scenario::load(file).expect("a checked file parses");
        for sc in scenarios {
            let line = format!("PASS {}: {}", file.display(), sc.name);
            assert!(
                stdout.lines().any(|l| l == line),
                "missing `{line}` in:\n{stdout}"
            );
            expected += 1;
        }
    }
    let passes = stdout.lines().filter(|l| l.starts_with("PASS ")).count();
    assert_eq!(passes, expected, "one PASS line per scenario:\n{stdout}");
    assert!(
        stdout.ends_with(&format!("{expected} passed, 0 failed\n")),
        "{stdout}"
    );
}

#[test]
fn a_failing_scenario_exits_1_with_a_diff_at_the_failing_step() {
    let tmp = TempDir::new("failing");
    let path = tmp.write("failing.yaml", FAILING);
    let out = qm(&[&path]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    for needle in [
        &format!(
            "FAIL {}: the second job is expected to run, wrongly",
            path.display()
        ),
        "  step 3 (expect): expectation not met",
        "    running: expected [b], actual [a]",
        "      missing: [b]",
        "      unexpected: [a]",
        "    runnable: expected [a], actual [b]",
        "    reason of a: expected OWN_QUOTA_FULL",
        "      actual: no pending reason, the job is RUNNING",
        "    reason of b: expected NOTHING_TO_BORROW",
        "      actual: OWN_QUOTA_FULL - needs 1 instance(s); the share uses 1 of its 1",
    ] {
        assert!(stdout.contains(needle), "missing `{needle}` in:\n{stdout}");
    }
    assert!(stdout.ends_with("0 passed, 1 failed\n"), "{stdout}");
    assert!(
        !stdout.contains("step 4"),
        "checking stops at the first failing expect:\n{stdout}"
    );
}

#[test]
fn a_malformed_file_exits_2_naming_the_file_key_and_line_and_the_other_files_are_still_checked() {
    let tmp = TempDir::new("malformed");
    let bad = tmp.write("bad.yaml", MALFORMED);
    let good = tmp.write("good.json", &json_of_passing());
    let out = qm(&[&bad, &good]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    for needle in [
        bad.display().to_string().as_str(),
        "shares[0]: unknown field `borow_limit`",
        "line 7 column 5",
    ] {
        assert!(stderr.contains(needle), "missing `{needle}` in:\n{stderr}");
    }
    assert!(
        stdout.contains(&format!(
            "PASS {}: one job runs on its own capacity",
            good.display()
        )),
        "{stdout}"
    );
    assert!(stdout.ends_with("1 passed, 0 failed\n"), "{stdout}");
}

#[test]
fn a_file_that_cannot_be_read_exits_2_even_when_another_scenario_fails() {
    let tmp = TempDir::new("unreadable");
    let failing = tmp.write("failing.yaml", FAILING);
    let missing = tmp.0.join("missing.yaml");
    let out = qm(&[&failing, &missing]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("missing.yaml: cannot read"), "{stderr}");
    assert!(text(&out.stdout).ends_with("0 passed, 1 failed\n"));
}

#[test]
fn a_folder_is_checked_file_by_file_and_several_documents_are_several_scenarios() {
    let tmp = TempDir::new("folder");
    tmp.write("a.yaml", &format!("{PASSING}---\n{PASSING}"));
    tmp.write("b.json", &json_of_passing());
    tmp.write("notes.txt", "not a scenario");
    let out = qm(&[&tmp.0]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert_eq!(stdout.lines().filter(|l| l.starts_with("PASS ")).count(), 3);
    assert!(stdout.ends_with("3 passed, 0 failed\n"), "{stdout}");
}

#[test]
fn the_verbose_report_of_a_failing_scenario_matches_its_golden_file() {
    let tmp = TempDir::new("golden");
    let path = tmp.write("failing.yaml", FAILING);
    let out = Command::new(env!("CARGO_BIN_EXE_qm"))
        .args(["check", "--verbose"])
        .arg(&path)
        .output()
        .expect("run qm");
    assert_eq!(out.status.code(), Some(1));
    let actual = text(&out.stdout).replace(&path.display().to_string(), "<tmp>/failing.yaml");
    let golden =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/check_failure_verbose.txt");
    if std::env::var_os("QM_BLESS").is_some() {
        std::fs::write(&golden, &actual).expect("bless the golden file");
    }
    let expected = std::fs::read_to_string(&golden).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; create it with QM_BLESS=1 cargo test -p qm-cli --test check",
            golden.display()
        )
    });
    assert_eq!(
        actual, expected,
        "the report changed; if intended, bless it with QM_BLESS=1 cargo test -p qm-cli --test check"
    );
}

/// [`PASSING`], written as JSON.
fn json_of_passing() -> String {
    r#"{
  "name": "one job runs on its own capacity",
  "environment": {"ml.g5.xlarge": 1},
  "shares": [{"name": "A", "limits": {"ml.g5.xlarge": 1}, "strategy": "RESERVE"}],
  "steps": [
    {"submit": {"job": "a", "share": "A", "instance_type": "ml.g5.xlarge"}},
    {"expect": {"running": ["a"], "runnable": []}}
  ]
}
"#
    .to_string()
}
