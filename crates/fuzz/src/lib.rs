//! Fuzz targets: each takes arbitrary bytes and feeds them to one parser of what comes from
//! outside (a client's request, a SageMaker payload, a cluster or scenario file, Slurm's
//! output, a page token, an ARN, a SigV4 header). A target may refuse its input with an error;
//! it must not panic, hang or grow without bound.
//!
//! Two drivers run them: cargo-fuzz (`fuzz/`, nightly, coverage-guided; see fuzz/README.md)
//! and the corpus test (`tests/corpus.rs`), which replays every file of `fuzz/corpus/<target>/`
//! on the stable toolchain as part of `scripts/test`, so that every input that once found a
//! bug keeps being checked.

use std::path::Path;

use qm_server::command::Command;
use qm_server::http::parse_operation;
use qm_server::request::Request;
use qm_server::state::State;

/// A fuzz target: a name (its corpus directory and cargo-fuzz binary) and its function.
pub type Target = (&'static str, fn(&[u8]));

/// Every target.
pub const TARGETS: &[Target] = &[
    ("api_request", api_request),
    ("sagemaker_payload", sagemaker_payload),
    ("cluster_file", cluster_file),
    ("scenario_file", scenario_file),
    ("slurm_squeue", slurm_squeue),
    ("slurm_sinfo", slurm_sinfo),
    ("page_token", page_token),
    ("arn", arn),
    ("sigv4_header", sigv4_header),
    ("storage_uri", storage_uri),
];

/// The first line names the operation (`submitservicejob`, ...), the rest is its body: routed
/// and decoded as the HTTP layer does, then, if it is a command, applied to a state that holds
/// a queue with a share and a running and a waiting job (validation, permissions, the core).
pub fn api_request(data: &[u8]) {
    let (operation, body) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let operation = String::from_utf8_lossy(operation).to_ascii_lowercase();
    match parse_operation(&operation, body) {
        Ok(Request::Command(command)) => {
            let mut state = seeded_state();
            // Half the inputs act as an admin, half as a principal with no rights but its own.
            let caller = Command::As {
                caller: qm_server::command::Caller {
                    name: "fuzz".into(),
                    groups: Vec::new(),
                    admin: data.len().is_multiple_of(2),
                },
                command: Box::new(command),
                audit: None,
            };
            let _ = state.apply_batch(100, vec![caller]);
        }
        Ok(Request::Query(query)) => {
            let state = seeded_state();
            let _ = state.query(&query, 100);
        }
        // The AWS operations never parse into a reload.
        Ok(Request::Reload(_)) | Err(_) => {}
    }
}

/// A SageMaker CreateTrainingJob payload, as SubmitServiceJob's `serviceRequestPayload`.
pub fn sagemaker_payload(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = qm_api::TrainingPayload::parse(text);
    }
}

/// A cluster file (`qm plan`, `qm apply`, `qm simulate --policy`).
pub fn cluster_file(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = qm_cli::cluster::parse(text, Path::new("fuzz.yaml"));
    }
}

/// A scenario file (`qm check`).
pub fn scenario_file(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = qm_cli::scenario::parse(text, Path::new("fuzz.yaml"));
    }
}

/// `squeue --json`.
pub fn slurm_squeue(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = qm_executor::slurm::report::parse_squeue(text);
    }
}

/// `sinfo` in the executor's format.
pub fn slurm_sinfo(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = qm_executor::slurm::report::parse_sinfo(text);
    }
}

/// A `nextToken`; one that decodes must encode back to itself.
pub fn page_token(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(position) = qm_api::page::decode_token("nextToken", text) {
            assert_eq!(qm_api::page::encode_token(&position), text);
        }
    }
}

/// An ARN or name in a request field, and a percent-encoded URI label.
pub fn arn(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let arns = qm_api::Arns::new("us-east-1", "123456789012");
        let _ = arns.parse("jobQueue", text);
        let _ = qm_api::arn::decode_uri_label("resourceArn", text);
    }
}

/// An `Authorization` and an `X-Amz-Date` header value.
pub fn sigv4_header(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = qm_api::sigv4::parse_authorization(text);
        let _ = qm_api::sigv4::parse_amz_date(text);
    }
}

/// A storage URI as a payload names it (a channel, `CheckpointConfig.S3Uri`,
/// `S3OutputPath`), and, split at the first line break, an `[executor.images]` pattern and a
/// `TrainingImage`. What parses holds only plain components (the server writes where they
/// point, as root); an image that passes the check never reads as an option.
pub fn storage_uri(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(uri) = qm_storage::StorageUri::parse(text) {
        match &uri.location {
            qm_storage::Location::S3 { bucket, key } => {
                assert!(!bucket.is_empty());
                assert!(key
                    .iter()
                    .all(|k| !k.is_empty() && k != "." && k != ".." && !k.contains(['/', '\0'])));
            }
            qm_storage::Location::File(path) => {
                use std::path::Component;
                assert!(path
                    .components()
                    .all(|c| matches!(c, Component::RootDir | Component::Normal(_))));
            }
        }
        let _ = uri.join(&["job", "output", "model.tar.gz"]);
    }
    let (pattern, image) = text.split_once('\n').unwrap_or((text, text));
    let podman = qm_executor::Podman {
        program: "podman".into(),
        global_args: Vec::new(),
        run_args: Vec::new(),
        images: std::collections::BTreeMap::from([(
            pattern.to_string(),
            "localhost/x".to_string(),
        )]),
    };
    let _ = podman.image_for(image);
    if qm_executor::valid_image(image) {
        assert!(!image.starts_with('-'));
    }
}

/// The request bodies that build [`seeded_state`], as clients send them.
const SETUP: &[(&str, &str)] = &[
    (
        "createschedulingpolicy",
        r#"{"name":"p","quotaSharePolicy":{"idleResourceAssignmentStrategy":"FIFO"}}"#,
    ),
    (
        "createserviceenvironment",
        r#"{"serviceEnvironmentName":"se","serviceEnvironmentType":"SAGEMAKER_TRAINING","capacityLimits":[{"maxCapacity":2,"capacityUnit":"ml.g5.xlarge"}]}"#,
    ),
    (
        "createjobqueue",
        r#"{"jobQueueName":"q","jobQueueType":"SAGEMAKER_TRAINING","priority":1,"schedulingPolicyArn":"arn:aws:batch:us-east-1:123456789012:scheduling-policy/p","serviceEnvironmentOrder":[{"order":1,"serviceEnvironment":"se"}]}"#,
    ),
    (
        "createquotashare",
        r#"{"quotaShareName":"a","jobQueue":"q","capacityLimits":[{"maxCapacity":1,"capacityUnit":"ml.g5.xlarge"}],"resourceSharingConfiguration":{"strategy":"LEND_AND_BORROW","borrowLimit":-1},"preemptionConfiguration":{"inSharePreemption":"ENABLED"}}"#,
    ),
    (
        "submitservicejob",
        r#"{"jobName":"j1","jobQueue":"q","serviceJobType":"SAGEMAKER_TRAINING","quotaShareName":"a","serviceRequestPayload":"{\"TrainingJobName\":\"j\",\"RoleArn\":\"arn:aws:iam::123456789012:role/x\",\"AlgorithmSpecification\":{\"TrainingInputMode\":\"File\",\"ContainerEntrypoint\":[\"true\"]},\"ResourceConfig\":{\"InstanceType\":\"ml.g5.xlarge\",\"InstanceCount\":1,\"VolumeSizeInGB\":1},\"OutputDataConfig\":{\"S3OutputPath\":\"s3://b/o\"}}"}"#,
    ),
    (
        "submitservicejob",
        r#"{"jobName":"j2","jobQueue":"q","serviceJobType":"SAGEMAKER_TRAINING","quotaShareName":"a","schedulingPriority":5,"serviceRequestPayload":"{\"TrainingJobName\":\"j\",\"RoleArn\":\"arn:aws:iam::123456789012:role/x\",\"AlgorithmSpecification\":{\"TrainingInputMode\":\"File\",\"ContainerEntrypoint\":[\"true\"]},\"ResourceConfig\":{\"InstanceType\":\"ml.g5.xlarge\",\"InstanceCount\":2,\"VolumeSizeInGB\":1},\"OutputDataConfig\":{\"S3OutputPath\":\"s3://b/o\"}}"}"#,
    ),
];

/// A state with a queue `q`, a share `a` and two jobs (one runs).
pub fn seeded_state() -> State {
    let mut state = State::new(
        qm_api::Arns::new("us-east-1", "123456789012"),
        Default::default(),
    );
    let mut commands = vec![Command::SetCapacity {
        capacity: [("ml.g5.xlarge".to_string(), 2)].into(),
    }];
    for (i, (operation, body)) in SETUP.iter().enumerate() {
        match parse_operation(operation, body.as_bytes()) {
            Ok(Request::Command(Command::SubmitServiceJob {
                request, principal, ..
            })) => commands.push(Command::SubmitServiceJob {
                job_id: format!("{i:08}-0000-4000-8000-000000000000"),
                request,
                principal,
            }),
            Ok(Request::Command(c)) => commands.push(c),
            other => panic!("setup request {operation} does not decode: {other:?}"),
        }
    }
    let outcome = state.apply_batch(1, commands);
    assert!(
        outcome.results.iter().all(Result::is_ok),
        "setup refused: {:?}",
        outcome.results
    );
    state
}
