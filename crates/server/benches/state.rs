//! Benchmarks of the server state (divan; `cargo bench -p qm-server --bench state`).
//!
//! One queue, one share entitled to 64 instances, and N jobs submitted through the same
//! `SubmitServiceJob` command the API logs (the payload of `bench/load/submit.lua`), so 64 run
//! and the rest wait RUNNABLE: the state `scripts/bench-load` part 1 builds.
//!
//! * `submit`: applying one more SubmitServiceJob (and the pass) to a state holding N jobs.
//! * `image`: taking the snapshot image (`State::image`) of a state holding N jobs: what
//!   the driver thread pays before a snapshot is encoded on its own thread.
//! * `encode`: encoding that image (on the snapshot thread).
//!
//! N is 100,000 (1,000 when run as a test, e.g. `cargo test --all-targets`).

use qm_api::Arns;
use qm_server::command::Command;
use qm_server::state::State;
use serde_json::{json, Value};

fn main() {
    divan::main();
}

fn jobs() -> u64 {
    if cfg!(debug_assertions) {
        1_000
    } else {
        100_000
    }
}

fn cmd(op: &str, body: Value) -> Command {
    serde_json::from_value(json!({"op": op, "body": body})).expect("command decodes")
}

fn submit(i: u64) -> Command {
    let payload = json!({
        "TrainingJobName": "load", "RoleArn": "arn:aws:iam::123456789012:role/x",
        "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": ["sleep", "86399"]},
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 1},
        "OutputDataConfig": {"S3OutputPath": "s3://b/o"}
    });
    Command::SubmitServiceJob {
        job_id: format!("{i:08}-0000-4000-8000-000000000000"),
        request: serde_json::from_value(json!({
            "jobName": format!("load-{i}"), "jobQueue": "load-q",
            "serviceJobType": "SAGEMAKER_TRAINING", "quotaShareName": "load",
            "schedulingPriority": i % 10, "serviceRequestPayload": payload.to_string()
        }))
        .unwrap(),
        principal: Some("bench".into()),
    }
}

/// Applies a batch that must be accepted whole.
fn applied(s: &mut State, now: i64, commands: Vec<Command>) {
    let outcome = s.apply_batch(now, commands);
    assert!(
        outcome.results.iter().all(Result::is_ok),
        "a setup command was refused"
    );
}

fn state(n: u64) -> State {
    let mut s = State::new(Arns::new("us-east-1", "123456789012"), Default::default());
    let setup = vec![
        cmd(
            "CreateSchedulingPolicy",
            json!({"name": "p", "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}}),
        ),
        cmd(
            "CreateServiceEnvironment",
            json!({"serviceEnvironmentName": "se", "serviceEnvironmentType": "SAGEMAKER_TRAINING",
            "capacityLimits": [{"maxCapacity": 64, "capacityUnit": "ml.g5.xlarge"}]}),
        ),
        cmd(
            "CreateJobQueue",
            json!({"jobQueueName": "load-q", "jobQueueType": "SAGEMAKER_TRAINING", "priority": 1,
            "schedulingPolicyArn": "arn:aws:batch:us-east-1:123456789012:scheduling-policy/p",
            "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "se"}]}),
        ),
        cmd(
            "CreateQuotaShare",
            json!({"quotaShareName": "load", "jobQueue": "load-q",
            "capacityLimits": [{"maxCapacity": 64, "capacityUnit": "ml.g5.xlarge"}],
            "resourceSharingConfiguration": {"strategy": "LEND"},
            "preemptionConfiguration": {"inSharePreemption": "DISABLED"}}),
        ),
        Command::SetCapacity {
            capacity: [("ml.g5.xlarge".to_string(), 64)].into(),
        },
    ];
    applied(&mut s, 1, setup);
    let ids: Vec<u64> = (0..n).collect();
    for chunk in ids.chunks(2048) {
        applied(
            &mut s,
            2 + chunk[0] as i64,
            chunk.iter().map(|&i| submit(i)).collect(),
        );
    }
    s
}

#[divan::bench(sample_count = 20)]
fn submit_one(b: divan::Bencher) {
    let n = jobs();
    let mut s = state(n);
    let mut i = n;
    b.bench_local(|| {
        i += 1;
        s.apply_batch(10_000_000 + i as i64, vec![submit(i)])
    });
}

#[divan::bench(sample_count = 10)]
fn image(b: divan::Bencher) {
    let s = state(jobs());
    b.bench_local(|| s.image());
}

#[divan::bench(sample_count = 5)]
fn encode(b: divan::Bencher) {
    let image = state(jobs()).image();
    b.bench_local(|| qm_server::snapshot::encode_image(&image).expect("encode"));
}

#[divan::bench(sample_count = 10)]
fn core_image(b: divan::Bencher) {
    let s = state(jobs());
    b.bench_local(|| s.core.image());
}
