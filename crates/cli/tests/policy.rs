//! End-to-end tests of `qm plan`, `qm apply` and `qm audit`: the real binary against a real
//! `qm serve` on a free port with a temporary data directory, running real (`sleep`) jobs.
//!
//! Outputs are golden files under `tests/golden/policy/`, with job ids replaced by the jobs'
//! names and times by `<TIME>`; after an intended change of the output, bless them with
//! `QM_BLESS=1 cargo test -p qm-cli --test policy`.
//!
//! Every command signs as the server's first admin, with the key it wrote to
//! `<data-dir>/credentials`.

// A test tells one story from start to end; the length rule is for the product's code.
#![allow(clippy::too_many_lines)]

mod support;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use qm_cli::client::Client;
use serde_json::{json, Value};
use support::Profile;

/// The first cluster file: research lends and borrows, ops owns nothing yet, `old` is to go.
const FIRST: &str = "name: three teams on three instances
job_queue: training
environment: {ml.g5.xlarge: 3}
shares:
  - {name: research, limits: {ml.g5.xlarge: 2}, strategy: LEND_AND_BORROW, borrow_limit: 100}
  - {name: inference, limits: {ml.g5.xlarge: 1}, strategy: LEND}
  - {name: ops, limits: {ml.g5.xlarge: 0}, strategy: RESERVE}
  - {name: old, limits: {ml.g5.xlarge: 0}, strategy: LEND}
";

/// The second: research's quota shrinks to give ops one instance, and `old` is removed.
const SECOND: &str = "job_queue: training
service_environment: training-se
scheduling_policy: training-policy
environment: {ml.g5.xlarge: 3}
shares:
  - {name: research, limits: {ml.g5.xlarge: 1}, strategy: LEND_AND_BORROW, borrow_limit: 100}
  - {name: inference, limits: {ml.g5.xlarge: 1}, strategy: LEND}
  - {name: ops, limits: {ml.g5.xlarge: 1}, strategy: RESERVE}
";

/// Permissions and thrash protection, which the server keeps as share tags.
const TAGGED: &str = "job_queue: training
environment: {ml.g5.xlarge: 3}
shares:
  - name: research
    limits: {ml.g5.xlarge: 2}
    strategy: LEND_AND_BORROW
    submitters: [group:research]
    leads: [alice]
    max_priority: 100
    min_runtime_seconds: 600
  - {name: ops, limits: {ml.g5.xlarge: 1}, strategy: RESERVE, max_preemptions_per_hour: 2}
";

/// research lets bob submit too, drops its lead and shortens its protection.
const RETAGGED: &str = "job_queue: training
environment: {ml.g5.xlarge: 3}
shares:
  - name: research
    limits: {ml.g5.xlarge: 2}
    strategy: LEND_AND_BORROW
    submitters: [group:research, bob]
    max_priority: 100
    min_runtime_seconds: 300
  - {name: ops, limits: {ml.g5.xlarge: 1}, strategy: RESERVE, max_preemptions_per_hour: 2}
";

/// RETAGGED, and the server's admins besides `qm-admin`.
fn with_admins() -> String {
    format!("{RETAGGED}admins: [ops]\n")
}

const CONFIG: &str = "[executor]
stop_grace_seconds = 1

[[executor.pool]]
instance_type = \"ml.g5.xlarge\"
count = 3
";

/// A `qm serve` on a free port, stopped (SIGTERM, then SIGKILL) when dropped.
struct Server {
    child: Child,
    endpoint: String,
    dir: tempfile::TempDir,
    agent: ureq::Agent,
    /// Who the tests sign as: the admin (`None`: the server wrote no key).
    admin: Option<Profile>,
}

impl Server {
    fn start() -> Server {
        let dir = tempfile::tempdir().expect("a temp dir");
        std::fs::write(dir.path().join("qm.toml"), CONFIG).expect("write the config");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(env!("CARGO_BIN_EXE_qm"))
            .arg("serve")
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg("--config")
            .arg(dir.path().join("qm.toml"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start qm serve");
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .into();
        let mut server = Server {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            dir,
            agent,
            admin: None,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let up = server
                .agent
                .get(format!("{}/healthz", server.endpoint))
                .call()
                .is_ok_and(|r| r.status() == 200);
            if up {
                server.admin = Profile::admin(&server.dir.path().join("data"));
                return server;
            }
            assert!(
                Instant::now() < deadline,
                "qm serve did not come up in 10 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn call(&self, operation: &str, body: Value) -> Value {
        let client: Client = support::client(&self.endpoint, self.admin.as_ref());
        client
            .call_json(operation, &body)
            .unwrap_or_else(|e| panic!("{operation}: {e}"))
    }

    fn submit(&self, name: &str, share: &str, priority: i32) -> String {
        let payload = json!({
            "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1},
            "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": ["sleep", "60"]},
        });
        let r = self.call(
            "submitservicejob",
            json!({
                "jobName": name, "jobQueue": "training", "serviceJobType": "SAGEMAKER_TRAINING",
                "quotaShareName": share, "schedulingPriority": priority,
                "serviceRequestPayload": payload.to_string(),
            }),
        );
        r["jobId"].as_str().expect("a job id").to_string()
    }

    fn status(&self, id: &str) -> String {
        self.call("describeservicejob", json!({"jobId": id}))["status"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Runs `qm ARGS` in the temp dir, where the cluster files are; returns (exit code, stdout).
    fn qm(&self, args: &[&str]) -> (i32, String) {
        let out = support::qm(self.admin.as_ref())
            .args(args)
            .arg("--endpoint")
            .arg(&self.endpoint)
            .current_dir(self.dir.path())
            .env("QM_ACTOR", "alice@example")
            .stdin(Stdio::null())
            .output()
            .expect("run qm");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.is_empty() || out.status.code() == Some(1),
            "stderr: {stderr}"
        );
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8(out.stdout).expect("utf-8"),
        )
    }

    fn write(&self, name: &str, contents: &str) {
        std::fs::write(self.dir.path().join(name), contents).expect("write a cluster file");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let data = self.dir.path().join("data");
        support::stop_attempts(&self.endpoint, self.admin.as_ref(), &data);
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Replaces every `2026-11-29T13:37:45Z`-shaped time with `YYYY-MM-DDTHH:MM:SSZ`.
fn without_times(s: &str) -> String {
    let shape = b"dddd-dd-ddTdd:dd:ddZ";
    let bytes = s.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < bytes.len() {
        let matches = bytes.len() - i >= shape.len()
            && shape.iter().zip(&bytes[i..]).all(|(p, b)| match p {
                b'd' => b.is_ascii_digit(),
                p => p == b,
            });
        if matches {
            out.push_str("YYYY-MM-DDTHH:MM:SSZ");
            i += shape.len();
        } else {
            let c = s[i..].chars().next().expect("a char");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

fn golden(name: &str, actual: &str) {
    let path: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/policy")
        .join(name);
    if std::env::var_os("QM_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("create golden dir");
        std::fs::write(&path, actual).expect("bless the golden file");
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; create it with QM_BLESS=1 cargo test -p qm-cli --test policy",
            path.display()
        )
    });
    assert_eq!(
        actual, expected,
        "{name} changed; if intended, bless it with QM_BLESS=1 cargo test -p qm-cli --test policy"
    );
}

#[test]
fn plan_apply_and_audit_a_cluster_file_through_a_reclaim() {
    let server = Server::start();
    server.write("first.yaml", FIRST);
    server.write("second.yaml", SECOND);

    // An empty server: everything is to be created.
    let (code, out) = server.qm(&["plan", "-f", "first.yaml"]);
    assert_eq!(code, 2, "{out}");
    golden("plan_empty.txt", &out);
    let (code, out) = server.qm(&["plan", "-f", "first.yaml", "--output", "json"]);
    assert_eq!(code, 2, "{out}");
    golden("plan_empty.json", &out);

    let (code, out) = server.qm(&["apply", "-f", "first.yaml", "--yes"]);
    assert_eq!(code, 0, "{out}");
    golden("apply_first.txt", &out);

    // Applied: nothing left to do, and applying again changes nothing.
    let (code, out) = server.qm(&["plan", "-f", "first.yaml"]);
    assert_eq!(code, 0, "{out}");
    golden("plan_no_changes.txt", &out);
    let (code, out) = server.qm(&["apply", "-f", "first.yaml", "--yes"]);
    assert_eq!(code, 0, "{out}");
    golden("apply_no_op.txt", &out);

    // research runs three jobs, one on inference's idle instance; ops waits (its quota is 0).
    let jobs = [
        ("r1", server.submit("r1", "research", 5)),
        ("r2", server.submit("r2", "research", 3)),
        ("r3", server.submit("r3", "research", 1)),
        ("o1", server.submit("o1", "ops", 0)),
    ];
    let deadline = Instant::now() + Duration::from_secs(10);
    while !jobs[..3]
        .iter()
        .all(|(_, id)| server.status(id) == "RUNNING")
    {
        assert!(Instant::now() < deadline, "research's jobs did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(server.status(&jobs[3].1), "RUNNABLE");
    let named = |s: String| {
        jobs.iter().fold(s, |s, (name, id)| {
            s.replace(id.as_str(), &format!("<{name}>"))
        })
    };

    // Shrinking research exposes its two lowest-priority jobs; ops' waiting job would take r3's.
    let (code, out) = server.qm(&["plan", "-f", "second.yaml"]);
    assert_eq!(code, 2, "{out}");
    golden("plan_lower.txt", &named(out));
    let (code, out) = server.qm(&["plan", "-f", "second.yaml", "--output", "json"]);
    assert_eq!(code, 2, "{out}");
    // The jobs named most likely to be picked are the ones the scheduler picks: its victims
    // are the first of that list (one rule, the core's, for both).
    let plan: Value = serde_json::from_str(&out).expect("JSON");
    let ids = |v: &Value| -> Vec<String> {
        v.as_array()
            .expect("jobs")
            .iter()
            .map(|j| j["id"].as_str().expect("id").to_string())
            .collect()
    };
    let victims = ids(&plan["preempted"][0]["victims"]);
    let likely = ids(&plan["preemptible"][0]["jobs"]);
    assert!(!victims.is_empty() && likely.starts_with(&victims), "{out}");
    golden("plan_lower.json", &named(out));

    let (code, out) = server.qm(&["apply", "-f", "second.yaml", "--yes"]);
    assert_eq!(code, 0, "{out}");
    golden("apply_second.txt", &named(out));
    // And once applied, the scheduler preempts exactly those.
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.status(&jobs[3].1) != "RUNNING" {
        assert!(
            Instant::now() < deadline,
            "ops' job did not start: {}",
            server.status(&jobs[3].1)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for (_, id) in &jobs[..3] {
        let preempted = victims.contains(id);
        let job = server.call("describeservicejob", json!({"jobId": id}));
        let attempts = job["preemptionSummary"]["preemptedAttemptCount"]
            .as_u64()
            .unwrap_or(0);
        assert_eq!(attempts > 0, preempted, "{id}: {job}");
    }
    let (code, out) = server.qm(&["plan", "-f", "second.yaml"]);
    assert_eq!(code, 0, "{out}");
    let shares = server.call("listquotashares", json!({"jobQueue": "training"}));
    let names: Vec<&str> = shares["quotaShares"]
        .as_array()
        .expect("shares")
        .iter()
        .filter_map(|s| s["quotaShareName"].as_str())
        .collect();
    assert!(!names.contains(&"old"), "old was not deleted: {names:?}");

    // The audit log has both applies (not the no-op) and each change they made, oldest first,
    // every one by the principal that signed it: QM_ACTOR is only what the client claims.
    let (code, out) = server.qm(&["audit"]);
    assert_eq!(code, 0, "{out}");
    golden("audit.txt", &without_times(&out));
    let (code, out) = server.qm(&["audit", "--output", "json"]);
    assert_eq!(code, 0, "{out}");
    let mut log: Value = serde_json::from_str(&out).expect("JSON");
    let entries = log["entries"].as_array_mut().expect("entries");
    let applies = entries.iter().filter(|e| e["action"] == "apply").count();
    assert_eq!(applies, 2, "{out}");
    assert!(entries.iter().all(|e| e["actor"] == "qm-admin"), "{out}");
    assert!(entries
        .windows(2)
        .all(|w| w[0]["at"].as_i64() <= w[1]["at"].as_i64()));
    for e in entries.iter_mut() {
        e["at"] = json!("<TIME>");
    }
    golden(
        "audit.json",
        &named(serde_json::to_string_pretty(&log).expect("JSON")),
    );
}

/// The ARN of quota share `share` of the `training` queue.
fn share_arn(server: &Server, share: &str) -> String {
    let shares = server.call("listquotashares", json!({"jobQueue": "training"}));
    shares["quotaShares"]
        .as_array()
        .expect("shares")
        .iter()
        .find(|s| s["quotaShareName"] == share)
        .and_then(|s| s["quotaShareArn"].as_str())
        .unwrap_or_else(|| panic!("no share {share}: {shares}"))
        .to_string()
}

/// A share's tags as DescribeQuotaShare shows them.
fn share_tags(server: &Server, share: &str) -> Value {
    let d = server.call(
        "describequotashare",
        json!({"quotaShareArn": share_arn(server, share)}),
    );
    d["tags"].clone()
}

#[test]
fn permissions_and_protection_in_the_file_become_share_tags_and_only_those_are_managed() {
    let server = Server::start();
    server.write("tagged.yaml", TAGGED);
    server.write("retagged.yaml", RETAGGED);

    // Created with their tags, listed as fields of the share.
    let (code, out) = server.qm(&["plan", "-f", "tagged.yaml"]);
    assert_eq!(code, 2, "{out}");
    golden("plan_tags_create.txt", &out);
    let (code, out) = server.qm(&["apply", "-f", "tagged.yaml", "--yes"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        share_tags(&server, "research"),
        json!({
            "qm:submitters": "group:research",
            "qm:leads": "alice",
            "qm:max-priority": "100",
            "qm:min-runtime-seconds": "600",
        })
    );
    assert_eq!(
        share_tags(&server, "ops"),
        json!({"qm:max-preemptions-per-hour": "2"})
    );

    // A tag the file does not control is none of the plan's business.
    support::client(&server.endpoint, server.admin.as_ref())
        .tag_resource(
            &share_arn(&server, "research"),
            &[("team".to_string(), "ml".to_string())].into(),
        )
        .expect("tag research");
    let (code, out) = server.qm(&["plan", "-f", "tagged.yaml"]);
    assert_eq!(code, 0, "{out}");

    // A changed list and protection are set, a dropped field's tag is removed, `team` stays.
    let (code, out) = server.qm(&["plan", "-f", "retagged.yaml"]);
    assert_eq!(code, 2, "{out}");
    golden("plan_tags_change.txt", &out);
    let (code, out) = server.qm(&["apply", "-f", "retagged.yaml", "--yes"]);
    assert_eq!(code, 0, "{out}");
    golden("apply_tags_change.txt", &out);
    assert_eq!(
        share_tags(&server, "research"),
        json!({
            "qm:submitters": "group:research,bob",
            "qm:max-priority": "100",
            "qm:min-runtime-seconds": "300",
            "team": "ml",
        })
    );
    let (code, out) = server.qm(&["plan", "-f", "retagged.yaml"]);
    assert_eq!(code, 0, "{out}");
}

/// Job classes: the queue defines them, research names its default and allows both.
const CLASSES: &str = "job_queue: training
environment: {ml.g5.xlarge: 3}
classes:
  - {name: exploratory, interruptible: true}
  - {name: release, interruptible: false, max_priority: 500}
shares:
  - name: research
    limits: {ml.g5.xlarge: 2}
    strategy: LEND_AND_BORROW
    default_class: release
    classes: [exploratory, release]
  - {name: ops, limits: {ml.g5.xlarge: 1}, strategy: LEND}
";

#[test]
fn the_file_s_classes_become_queue_and_share_tags_and_decide_what_a_job_may_do() {
    let server = Server::start();
    server.write("classes.yaml", CLASSES);
    let (code, out) = server.qm(&["apply", "-f", "classes.yaml", "--yes"]);
    assert_eq!(code, 0, "{out}");
    let queues = server.call("describejobqueues", json!({"jobQueues": ["training"]}));
    assert_eq!(
        queues["jobQueues"][0]["tags"],
        json!({
            "qm:class.exploratory": "interruptible",
            "qm:class.release": "non-interruptible,max-priority=500",
        })
    );
    assert_eq!(
        share_tags(&server, "research"),
        json!({"qm:default-class": "release", "qm:classes": "exploratory,release"})
    );
    let (code, out) = server.qm(&["plan", "-f", "classes.yaml"]);
    assert_eq!(code, 0, "nothing left to change: {out}");
    // research's default class may not be interrupted: a priority above its maximum is
    // refused, naming the class; within its quota its jobs run, beyond it they wait rather
    // than borrow ops's idle instance.
    let client: Client = support::client(&server.endpoint, server.admin.as_ref());
    let payload = json!({
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1},
        "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": ["sleep", "60"]},
    });
    let refused = client
        .call_json(
            "submitservicejob",
            &json!({
                "jobName": "urgent", "jobQueue": "training", "serviceJobType": "SAGEMAKER_TRAINING",
                "quotaShareName": "research", "schedulingPriority": 900,
                "serviceRequestPayload": payload.to_string(),
            }),
        )
        .expect_err("a priority above the class's maximum");
    assert!(
        refused
            .to_string()
            .contains("above the maximum of class 'release' (500)"),
        "{refused}"
    );
    let ids: Vec<String> = (1..=3)
        .map(|i| server.submit(&format!("r{i}"), "research", 0))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let reason = loop {
        let d = server.call("describeservicejob", json!({"jobId": ids[2]}));
        let reason = d["statusReason"].as_str().unwrap_or_default().to_string();
        if reason.starts_with("NOT_INTERRUPTIBLE") || Instant::now() > deadline {
            break reason;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(reason.starts_with("NOT_INTERRUPTIBLE"), "{reason}");
    // Started, and kept: SCHEDULED until its supervisor reports it running.
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.status(&ids[0]) != "RUNNING" {
        assert!(Instant::now() < deadline, "{}", server.status(&ids[0]));
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// RETAGGED under fair sharing: research weighs 3 and is grouped with ops under a ceiling.
const FAIR: &str = "job_queue: training
environment: {ml.g5.xlarge: 3}
idle_assignment: FAIR_SHARE
fair_reclaim: true
groups:
  - {name: research-org, shares: [research, ops], limits: {ml.g5.xlarge: 2}, weight: 2}
shares:
  - name: research
    limits: {ml.g5.xlarge: 2}
    strategy: LEND_AND_BORROW
    submitters: [group:research, bob]
    max_priority: 100
    min_runtime_seconds: 300
    weight: 3
  - {name: ops, limits: {ml.g5.xlarge: 1}, strategy: RESERVE, max_preemptions_per_hour: 2}
";

#[test]
fn fair_sharing_in_the_file_becomes_policy_and_share_tags_and_groups_and_absence_keeps_them() {
    let server = Server::start();
    server.write("retagged.yaml", RETAGGED);
    server.write("fair.yaml", FAIR);
    let (code, out) = server.qm(&["apply", "-f", "retagged.yaml", "--yes"]);
    assert_eq!(code, 0, "{out}");

    let (code, out) = server.qm(&["plan", "-f", "fair.yaml"]);
    assert_eq!(code, 2, "{out}");
    golden("plan_fair.txt", &out);
    let (code, out) = server.qm(&["apply", "-f", "fair.yaml", "--yes"]);
    assert_eq!(code, 0, "{out}");
    let policies = server.call("listschedulingpolicies", json!({}));
    let arn = policies["schedulingPolicies"][0]["arn"].clone();
    let policy = server.call("describeschedulingpolicies", json!({"arns": [arn]}));
    assert_eq!(
        policy["schedulingPolicies"][0]["tags"],
        json!({"qm:idle-assignment": "FAIR_SHARE", "qm:fair-reclaim": "true"})
    );
    assert_eq!(share_tags(&server, "research")["qm:weight"], "3");
    assert_eq!(share_tags(&server, "research")["qm:group"], "research-org");
    assert_eq!(share_tags(&server, "ops")["qm:group"], "research-org");
    let client = support::client(&server.endpoint, server.admin.as_ref());
    let groups = client.queue_groups("training").expect("GET groups");
    assert_eq!(
        serde_json::to_value(&groups).unwrap(),
        json!({"groups": [{"name": "research-org", "limits": {"ml.g5.xlarge": 2}, "weight": 2}]})
    );
    let usage = client.usage().expect("usage");
    let fairness = usage.queues[0].fairness.as_ref().expect("fairness");
    assert_eq!(
        (fairness.idle_assignment.as_str(), fairness.fair_reclaim),
        ("FAIR_SHARE", true)
    );
    assert_eq!(fairness.groups[0].shares, ["ops", "research"]);

    // Applied; and a file silent on fair sharing leaves every part of it as it is.
    let (code, out) = server.qm(&["plan", "-f", "fair.yaml"]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = server.qm(&["plan", "-f", "retagged.yaml"]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = server.qm(&["apply", "-f", "retagged.yaml", "--yes"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(share_tags(&server, "research")["qm:weight"], "3");
    assert_eq!(client.queue_groups("training").expect("GET groups"), groups);
}

#[test]
fn the_file_s_admin_list_is_set_once_and_a_file_without_one_leaves_it_alone() {
    let server = Server::start();
    server.write("retagged.yaml", RETAGGED);
    server.write("admins.yaml", &with_admins());
    let (code, out) = server.qm(&["apply", "-f", "retagged.yaml", "--yes"]);
    assert_eq!(code, 0, "{out}");
    let client = support::client(&server.endpoint, server.admin.as_ref());
    assert_eq!(
        client.admins().expect("GET /qm/v1/admins"),
        Vec::<String>::new()
    );

    // The list is the one change, shown on one line and last in the JSON.
    let (code, out) = server.qm(&["plan", "-f", "admins.yaml"]);
    assert_eq!(code, 2, "{out}");
    golden("plan_admins.txt", &out);
    let (code, out) = server.qm(&["plan", "-f", "admins.yaml", "--output", "json"]);
    assert_eq!(code, 2, "{out}");
    golden("plan_admins.json", &out);
    let (code, out) = server.qm(&["apply", "-f", "admins.yaml", "--yes"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.ends_with("Applied: 0 to create, 1 to change, 0 to delete (~admins).\n"),
        "{out}"
    );
    assert_eq!(client.admins().expect("GET /qm/v1/admins"), ["ops"]);

    // Applied; and a file without `admins` does not manage the list.
    let (code, out) = server.qm(&["plan", "-f", "admins.yaml"]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = server.qm(&["plan", "-f", "retagged.yaml"]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = server.qm(&["apply", "-f", "retagged.yaml", "--yes"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(client.admins().expect("GET /qm/v1/admins"), ["ops"]);
}

#[test]
fn a_cluster_file_without_a_job_queue_is_refused_with_what_to_add() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = dir.path().join("c.yaml");
    std::fs::write(
        &file,
        "environment: {gpu: 1}\nshares: [{name: a, limits: {gpu: 1}, strategy: LEND}]\n",
    )
    .expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_qm"))
        .arg("plan")
        .arg("-f")
        .arg(&file)
        .args(["--endpoint", "http://127.0.0.1:9"])
        .output()
        .expect("run qm");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("job_queue"), "{err}");
}

#[test]
fn an_unreachable_server_is_an_error_that_says_what_to_do() {
    let out = Command::new(env!("CARGO_BIN_EXE_qm"))
        .args(["audit", "--endpoint", "http://127.0.0.1:9"])
        .output()
        .expect("run qm");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot reach the server"), "{err}");
}
