//! End-to-end tests of the client commands: the real `qm serve` on a free port with a fresh
//! data directory, resources created over HTTP, jobs submitted with the real `qm submit`, and
//! the stdout of every command compared with a golden file under `tests/golden/client/`.
//!
//! Outputs are normalized before the comparison: job ids become `<id-1>`, `<id-2>`... in the
//! order they first appear, timestamps `<time>`, ages and durations `<age>`, what attempts
//! used `<cpu>` and `<memory>`, and runs of spaces one double space (the normalized ids change the column widths). After an intended
//! change of the output, bless the files with `QM_BLESS=1 cargo test -p qm-cli --test client`.
//!
//! Every command signs as the server's first admin, with the key it wrote to
//! `<data-dir>/credentials`.

// A test tells one story from start to end; the length rule is for the product's code.
#![allow(clippy::too_many_lines)]

mod support;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use qm_cli::client::Client;
use serde_json::{json, Value};
use support::Profile;

/// A `qm serve` child process with its data directory; stopped (SIGTERM, then SIGKILL) and
/// cleaned up when dropped, also when a test panics.
struct Server {
    child: Child,
    dir: PathBuf,
    endpoint: String,
    /// Who the tests sign as: the admin (`None`: the server wrote no key).
    admin: Option<Profile>,
}

impl Server {
    fn start() -> Server {
        // One directory per server: the tests of this file run in parallel, each with its own.
        static SERVERS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = SERVERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("qm-client-test-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the temp dir");
        let config = dir.join("qm.toml");
        std::fs::write(
            &config,
            "[executor]\nstop_grace_seconds = 1\n[[executor.pool]]\n\
             instance_type = \"ml.g5.xlarge\"\ncount = 3\n\
             [[executor.pool]]\ninstance_type = \"ml.p4d.24xlarge\"\ncount = 1\n",
        )
        .expect("write the config");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("find a free port")
            .port();
        let log = std::fs::File::create(dir.join("serve.log")).expect("create the server log");
        let child = Command::new(env!("CARGO_BIN_EXE_qm"))
            .arg("serve")
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--data-dir")
            .arg(dir.join("data"))
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start qm serve");
        let mut server = Server {
            child,
            dir,
            endpoint: format!("http://127.0.0.1:{port}"),
            admin: None,
        };
        server.wait_healthy();
        server.admin = Profile::admin(&server.dir.join("data"));
        server
    }

    fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let url = format!("{}/healthz", self.endpoint);
        while Instant::now() < deadline {
            if ureq::get(&url).call().is_ok_and(|r| r.status() == 200) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "qm serve did not become healthy; see {}",
            self.dir.join("serve.log").display()
        );
    }

    fn client(&self) -> Client {
        support::client(&self.endpoint, self.admin.as_ref())
    }

    fn post(&self, operation: &str, body: Value) -> Value {
        self.client()
            .call(operation, &body)
            .unwrap_or_else(|e| panic!("{operation} failed: {e}"))
    }

    /// Runs `qm COMMAND --endpoint <this server> ARGS...`.
    fn qm(&self, args: &[&str]) -> Output {
        qm_at(&self.endpoint, self.admin.as_ref(), args)
    }

    /// Waits until the job has `status` (and, if given, a reason starting with `reason`).
    fn wait_for(&self, job_id: &str, status: &str, reason: Option<&str>) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut last = String::new();
        while Instant::now() < deadline {
            let job = self.client().describe(job_id).expect("describe the job");
            let reason_ok = reason.is_none_or(|r| {
                job.status_reason
                    .as_deref()
                    .is_some_and(|got| got.starts_with(r))
            });
            if job.status.as_str() == status && reason_ok {
                return;
            }
            last = format!("{} {:?}", job.status, job.status_reason);
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("job {job_id} never became {status} {reason:?}; last {last}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        support::stop_attempts(&self.endpoint, self.admin.as_ref(), &self.dir.join("data"));
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn qm_at(endpoint: &str, profile: Option<&Profile>, args: &[&str]) -> Output {
    // The endpoint goes right after the command: anything after `--` is the job's command.
    support::qm(profile)
        .arg(args[0])
        .arg("--endpoint")
        .arg(endpoint)
        .args(&args[1..])
        .output()
        .expect("run qm")
}

fn stdout_of(output: &Output) -> String {
    assert!(
        output.status.success(),
        "qm failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).expect("utf-8 output")
}

/// Normalizes ids, times and ages, keeping one numbering of ids across every golden file.
#[derive(Default)]
struct Normalizer {
    ids: BTreeMap<String, usize>,
}

impl Normalizer {
    fn normalize(&mut self, text: &str) -> String {
        let mut out = String::new();
        let mut usage_rows = false;
        for line in text.lines() {
            // What an attempt used is the machine's figure: the table stays, the figures go.
            if usage_rows && line.trim_start().starts_with(|c: char| c.is_ascii_digit()) {
                let attempt = line.split_whitespace().next().unwrap_or_default();
                out.push_str(&format!("  {attempt}  <cpu>  <memory>\n"));
                continue;
            }
            usage_rows = line == "usage per attempt" || (usage_rows && !line.is_empty());
            let mut words = Vec::new();
            for word in line.split(' ') {
                words.push(self.word(word));
            }
            let line = pids(&words.join(" "));
            // Keep the indentation; collapse the alignment padding after it.
            let body = line.trim_start();
            let mut body = body.to_string();
            while body.contains("   ") {
                body = body.replace("   ", "  ");
            }
            out.push_str(&line[..line.len() - line.trim_start().len()]);
            out.push_str(body.trim_end());
            out.push('\n');
        }
        out
    }

    fn word(&mut self, word: &str) -> String {
        // Ids can sit inside a word (`"<id>",`, `(<id>)`): replace every UUID-shaped run.
        let mut out = String::new();
        let chars: Vec<char> = word.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            if i + 36 <= chars.len() && is_uuid(&chars[i..i + 36]) {
                let id: String = chars[i..i + 36].iter().collect();
                let next = self.ids.len() + 1;
                let n = *self.ids.entry(id).or_insert(next);
                out.push_str(&format!("<id-{n}>"));
                i += 36;
            } else {
                out.push(chars[i]);
                i += 1;
            }
        }
        let trimmed = out.trim_end_matches([',', ')', ';']);
        let core = trimmed.trim_start_matches('(');
        let (before, after) = (
            &trimmed[..trimmed.len() - core.len()],
            &out[trimmed.len()..],
        );
        let replaced = if is_age(core) {
            "<age>"
        } else if is_timestamp(core) {
            "<time>"
        } else if core.len() == 13 && core.chars().all(|c| c.is_ascii_digit()) {
            "<ms>"
        } else {
            return out;
        };
        format!("{before}{replaced}{after}")
    }
}

/// Process ids (`pid 1234`) differ from run to run.
fn pids(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(at) = rest.find("pid ") {
        out.push_str(&rest[..at + 4]);
        rest = &rest[at + 4..];
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits > 0 {
            out.push_str("<pid>");
            rest = &rest[digits..];
        }
    }
    out.push_str(rest);
    out
}

fn is_uuid(chars: &[char]) -> bool {
    chars.iter().enumerate().all(|(i, c)| match i {
        8 | 13 | 18 | 23 => *c == '-',
        _ => c.is_ascii_hexdigit(),
    })
}

fn is_age(word: &str) -> bool {
    let Some(number) = word.strip_suffix(['s', 'm', 'h', 'd']) else {
        return false;
    };
    !number.is_empty() && number.chars().all(|c| c.is_ascii_digit())
}

fn is_timestamp(word: &str) -> bool {
    let shape = "0000-00-00T00:00:00Z";
    word.len() == shape.len()
        && word.chars().zip(shape.chars()).all(|(c, s)| match s {
            '0' => c.is_ascii_digit(),
            _ => c == s,
        })
}

/// Compares (or, with `QM_BLESS=1`, writes) golden files; reports every mismatch at once.
struct Golden {
    dir: PathBuf,
    bless: bool,
    normalizer: Normalizer,
    failures: Vec<String>,
}

impl Golden {
    fn new() -> Golden {
        Golden {
            dir: Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/client"),
            bless: std::env::var_os("QM_BLESS").is_some_and(|v| v == "1"),
            normalizer: Normalizer::default(),
            failures: Vec::new(),
        }
    }

    fn check(&mut self, name: &str, actual: &str) {
        let actual = self.normalizer.normalize(actual);
        let path = self.dir.join(format!("{name}.txt"));
        if self.bless {
            std::fs::create_dir_all(&self.dir).expect("create the golden dir");
            std::fs::write(&path, &actual).expect("write a golden file");
            return;
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_default();
        if expected != actual {
            self.failures.push(format!(
                "{name}: output differs from {}\n--- expected\n{expected}--- actual\n{actual}",
                path.display()
            ));
        }
    }

    fn finish(self) {
        assert!(
            self.failures.is_empty(),
            "{}\n(bless intended changes with QM_BLESS=1 cargo test -p qm-cli --test client)",
            self.failures.join("\n")
        );
    }
}

/// An environment of 3 ml.g5.xlarge: `research` owns 2 and lends, `inference` owns 1 and
/// may borrow.
fn create_cluster(server: &Server) {
    let policy = server.post(
        "CreateSchedulingPolicy",
        json!({"name": "teams", "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}}),
    );
    server.post(
        "CreateServiceEnvironment",
        json!({"serviceEnvironmentName": "gpus", "serviceEnvironmentType": "SAGEMAKER_TRAINING",
               "capacityLimits": [{"maxCapacity": 3, "capacityUnit": "ml.g5.xlarge"}]}),
    );
    server.post(
        "CreateJobQueue",
        json!({"jobQueueName": "training", "jobQueueType": "SAGEMAKER_TRAINING", "priority": 1,
               "schedulingPolicyArn": policy["arn"],
               "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "gpus"}]}),
    );
    for (share, limit, sharing) in [
        ("research", 2, json!({"strategy": "LEND"})),
        (
            "inference",
            1,
            json!({"strategy": "LEND_AND_BORROW", "borrowLimit": 100}),
        ),
    ] {
        server.post(
            "CreateQuotaShare",
            json!({"quotaShareName": share, "jobQueue": "training",
                   "capacityLimits": [{"maxCapacity": limit, "capacityUnit": "ml.g5.xlarge"}],
                   "resourceSharingConfiguration": sharing,
                   "preemptionConfiguration": {"inSharePreemption": "DISABLED"}}),
        );
    }
}

#[test]
fn every_client_command_prints_what_the_golden_files_show() {
    let server = Server::start();
    create_cluster(&server);
    let mut golden = Golden::new();

    // Two research jobs fill research's quota; a third waits, as research may not borrow.
    let mut submitted = String::new();
    let mut ids = Vec::new();
    for name in ["train-a", "train-b", "train-c"] {
        let out = stdout_of(&server.qm(&[
            "submit",
            "--share",
            "research",
            "--name",
            name,
            "--priority",
            "1",
            "--",
            "sleep",
            "60",
        ]));
        submitted.push_str(&out);
        ids.push(out.trim().to_string());
        // Distinct creation times keep `qm jobs` (newest first) in one order.
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = stdout_of(&server.qm(&[
        "submit",
        "--share",
        "inference",
        "--name",
        "quick",
        "--",
        "sh",
        "-c",
        "echo hello from quick; echo oops >&2",
    ]));
    submitted.push_str(&out);
    let quick = out.trim().to_string();
    let [train_a, _train_b, train_c] = [&ids[0], &ids[1], &ids[2]];
    server.wait_for(train_a, "RUNNING", None);
    server.wait_for(&ids[1], "RUNNING", None);
    server.wait_for(train_c, "RUNNABLE", Some("OWN_QUOTA_FULL"));
    server.wait_for(&quick, "SUCCEEDED", None);

    // A payload file, whose output `qm logs --follow` reads while it is written.
    let payload = server.dir.join("payload.json");
    std::fs::write(
        &payload,
        json!({"TrainingJobName": "ticks",
               "AlgorithmSpecification": {"TrainingInputMode": "File",
                   "ContainerEntrypoint": ["sh", "-c", "echo one; sleep 1; echo two"]},
               "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1}})
        .to_string(),
    )
    .expect("write the payload");
    std::thread::sleep(Duration::from_millis(20));
    let out = stdout_of(&server.qm(&[
        "submit",
        "--share",
        "inference",
        "--name",
        "ticks",
        "--payload",
        payload.to_str().expect("utf-8 path"),
    ]));
    submitted.push_str(&out);
    let ticks = out.trim().to_string();
    golden.check("submit", &submitted);
    server.wait_for(&ticks, "RUNNING", None);
    golden.check(
        "logs_follow",
        &stdout_of(&server.qm(&["logs", &ticks, "--follow"])),
    );
    server.wait_for(&ticks, "SUCCEEDED", None);

    golden.check("jobs", &stdout_of(&server.qm(&["jobs"])));
    golden.check(
        "jobs_research_runnable",
        &stdout_of(&server.qm(&["jobs", "--share", "research", "--status", "runnable"])),
    );
    golden.check("job_running", &stdout_of(&server.qm(&["job", train_a])));
    golden.check("job_finished", &stdout_of(&server.qm(&["job", &quick])));
    golden.check("logs", &stdout_of(&server.qm(&["logs", &quick])));
    golden.check(
        "logs_stderr",
        &stdout_of(&server.qm(&["logs", &quick, "--stderr", "--attempt", "1"])),
    );
    golden.check(
        "explain_waiting",
        &stdout_of(&server.qm(&["explain", train_c])),
    );
    golden.check(
        "explain_running",
        &stdout_of(&server.qm(&["explain", train_a])),
    );
    golden.check("shares", &stdout_of(&server.qm(&["shares"])));
    golden.check(
        "shares_json",
        &stdout_of(&server.qm(&["shares", "--output", "json"])),
    );
    golden.check("watch_once", &stdout_of(&server.qm(&["watch", "--once"])));

    let mut priority = stdout_of(&server.qm(&["priority", train_c, "5"]));
    priority.push_str(&stdout_of(&server.qm(&["jobs", "--status", "RUNNABLE"])));
    golden.check("priority", &priority);

    let mut terminate =
        stdout_of(&server.qm(&["terminate", train_c, "--reason", "no longer needed"]));
    server.wait_for(train_c, "FAILED", None);
    terminate.push_str(&stdout_of(&server.qm(&["job", train_c])));
    golden.check("terminate", &terminate);

    // A reclaim: research may now borrow, borrows inference's idle instance, and loses it
    // when inference's own job arrives.
    server.post(
        "UpdateQuotaShare",
        json!({"quotaShareArn": "arn:aws:batch:us-east-1:123456789012:job-queue/training/quota-share/research",
               "resourceSharingConfiguration": {"strategy": "LEND_AND_BORROW", "borrowLimit": 100}}),
    );
    let borrower = stdout_of(&server.qm(&[
        "submit", "--share", "research", "--name", "borrower", "--", "sleep", "60",
    ]));
    let borrower = borrower.trim();
    server.wait_for(borrower, "RUNNING", None);
    let owner = stdout_of(&server.qm(&[
        "submit",
        "--share",
        "inference",
        "--name",
        "owner",
        "--priority",
        "3",
        "--",
        "sleep",
        "60",
    ]));
    server.wait_for(owner.trim(), "RUNNING", None);
    server.wait_for(borrower, "RUNNABLE", Some("NOTHING_TO_BORROW"));
    golden.check("job_preempted", &stdout_of(&server.qm(&["job", borrower])));
    golden.check(
        "explain_nothing_to_borrow",
        &stdout_of(&server.qm(&["explain", borrower])),
    );
    golden.check("shares_after_reclaim", &stdout_of(&server.qm(&["shares"])));

    let mut errors = String::new();
    for (args, endpoint) in [
        (vec!["job", "no-such-job"], server.endpoint.as_str()),
        (
            vec!["jobs", "--status", "sleeping"],
            server.endpoint.as_str(),
        ),
        (vec!["jobs"], "http://127.0.0.1:1"),
    ] {
        let out = qm_at(endpoint, server.admin.as_ref(), &args);
        errors.push_str(&format!(
            "$ qm {}\nexit {}\n{}",
            args.join(" "),
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    golden.check("errors", &errors);
    golden.finish();
}

#[test]
fn a_watch_whose_reader_went_away_ends_quietly_and_logs_takes_no_output_flag() {
    use std::io::Read;
    let server = Server::start();
    create_cluster(&server);
    // `qm watch | head -c 16`: the reader takes a little and closes the pipe.
    let mut child = support::qm(server.admin.as_ref())
        .args(["watch", "--endpoint", &server.endpoint, "--interval", "0.1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start qm watch");
    let mut stdout = child.stdout.take().expect("piped");
    let mut first = [0u8; 16];
    stdout.read_exact(&mut first).expect("a first frame");
    drop(stdout);
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("qm watch kept running after its reader went away");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "stderr: {stderr}");
    assert!(
        stderr.is_empty(),
        "ends quietly, as `head` expects: {stderr}"
    );

    // A log is printed as the job wrote it: there is no --output to ignore.
    let out = server.qm(&[
        "logs",
        "0b9d7c1e-3f3a-4c55-9a57-2f0f1d3c6a11",
        "--output",
        "json",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--output"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_job_is_named_by_its_name_where_its_id_would_do_and_an_ambiguous_name_lists_the_ids() {
    let server = Server::start();
    create_cluster(&server);
    let submit = |name: &str| {
        let out = stdout_of(&server.qm(&[
            "submit", "--share", "research", "--name", name, "--", "sleep", "60",
        ]));
        out.trim().to_string()
    };
    let solo = submit("solo");
    let twins = [submit("twin"), submit("twin")];

    let shown = stdout_of(&server.qm(&["job", "solo", "--output", "json"]));
    let shown: Value = serde_json::from_str(&shown).expect("json");
    assert_eq!(shown["jobId"], solo.as_str());
    let out = stdout_of(&server.qm(&["priority", "solo", "7"]));
    assert_eq!(out.trim(), format!("job {solo}: priority 7"));

    let out = server.qm(&["job", "twin"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("2 jobs are named 'twin'"), "{err}");
    for id in &twins {
        assert!(err.contains(id.as_str()), "{err}");
    }
    let out = server.qm(&["explain", "nobody"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no job is named 'nobody'"), "{err}");
    for id in twins.iter().chain([&solo]) {
        stdout_of(&server.qm(&["terminate", id]));
    }
}

#[test]
fn a_job_that_can_never_run_fails_its_submit_unless_allowed_and_explain_names_the_offered_types() {
    let server = Server::start();
    create_cluster(&server);
    let mut golden = Golden::new();
    let mut transcript = String::new();
    let mut run = |args: &[&str]| {
        let out = server.qm(args);
        transcript.push_str(&format!(
            "$ qm {}\nexit {}\n{}{}",
            args.join(" "),
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
        out
    };
    // More instances than the environment's 3: refused at the command line, and not left
    // waiting behind.
    run(&[
        "submit", "--share", "research", "--name", "too-big", "--count", "5", "--", "sleep", "1",
    ]);
    // A type the server's pool has but the queue's environment does not offer, kept on
    // purpose.
    let out = run(&[
        "submit",
        "--share",
        "research",
        "--name",
        "elsewhere",
        "--instance-type",
        "ml.p4d.24xlarge",
        "--allow-never-runs",
        "--",
        "sleep",
        "1",
    ]);
    let kept = String::from_utf8_lossy(&out.stdout).trim().to_string();
    server.wait_for(
        &kept,
        "RUNNABLE",
        Some("MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE"),
    );
    run(&["explain", "elsewhere"]);
    run(&["jobs", "--status", "all"]);
    golden.check("never_runs", &transcript);
    golden.finish();
}

#[test]
fn a_drill_preempts_a_running_job_which_runs_again_and_qm_job_shows_the_drill() {
    let server = Server::start();
    create_cluster(&server);
    let mut golden = Golden::new();
    let id = stdout_of(&server.qm(&[
        "submit", "--share", "research", "--name", "drilled", "--", "sleep", "60",
    ]));
    let id = id.trim();
    server.wait_for(id, "RUNNING", None);
    let mut out = stdout_of(&server.qm(&["preempt", "drilled", "--reason", "resume check"]));
    // Back in the queue once `sleep` has gone, then running again on the same capacity.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let job = server.client().describe(id).expect("describe the job");
        let count = job
            .preemption_summary
            .and_then(|s| s.preempted_attempt_count)
            .unwrap_or(0);
        if count == 1 && job.status.as_str() == "RUNNING" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the drilled job did not run again"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let job = stdout_of(&server.qm(&["job", "drilled"]));
    let from = job.find("\npreemptions").expect("a preemptions section");
    out.push_str(&job[from..]);
    golden.check("preempt", &out);
    golden.finish();
}

#[test]
fn a_job_that_reports_its_steps_resumes_after_a_drill_and_qm_job_shows_how() {
    let server = Server::start();
    create_cluster(&server);
    let mut golden = Golden::new();
    // The first attempt reaches step 120 with its checkpoint at step 100; the next one reads
    // the checkpoint back and reports step 100 first.
    let script = r#"ckpt="$SM_CHECKPOINT_DIR/step"
if [ -f "$ckpt" ]; then
  echo "{\"step\": $(cat "$ckpt")}" >> "$QM_PROGRESS_FILE"
else
  echo 100 > "$ckpt"
  printf '{"step": 0}\n{"step": 100, "checkpoint_step": 100}\n{"step": 120}\n' >> "$QM_PROGRESS_FILE"
fi
exec sleep 60"#;
    let id = stdout_of(&server.qm(&[
        "submit", "--share", "research", "--name", "learner", "--", "sh", "-c", script,
    ]));
    let id = id.trim();
    let client = server.client();
    let wait = |what: &str, done: &dyn Fn(&qm_api::qm::JobAttemptNow) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done(&client.attempt_now(id).expect("the job's attempt")) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait("step 120", &|now| {
        now.running.as_ref().and_then(|a| a.last_step) == Some(120)
    });
    stdout_of(&server.qm(&["preempt", "learner", "--reason", "resume check"]));
    wait("the second attempt's first step", &|now| {
        now.resumes.first().is_some_and(|r| r.first_step.is_some())
            && now.running.as_ref().is_some_and(|a| a.number == 2)
    });
    let job = stdout_of(&server.qm(&["job", "learner"]));
    let from = job.find("\nattempt ").expect("a running attempt");
    golden.check("job_resumed", &job[from..]);
    golden.finish();
}
