//! The `serviceRequestPayload` of SubmitServiceJob: a SageMaker `CreateTrainingJob` request as
//! a JSON string. AWS Batch forwards it unread; Quartermaster must read it, because the
//! instance type and count are the job's demand against its quota, and because it runs the
//! entrypoint itself as a host process (no container runtime is assumed). Only the members that
//! matter for scheduling and running are read; the rest is kept in the stored string.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::error::{shown, ApiError};

pub(crate) const FIELD: &str = "serviceRequestPayload";

/// What Quartermaster needs from a training request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TrainingPayload {
    /// `TrainingJobName`; attempts are named after it.
    pub training_job_name: Option<String>,
    /// `ResourceConfig.InstanceType`: the capacity unit.
    pub instance_type: String,
    /// `ResourceConfig.InstanceCount`: instances charged against quotas; at least 1.
    pub instance_count: u32,
    /// `AlgorithmSpecification.ContainerEntrypoint`: the program and its leading arguments.
    pub entrypoint: Vec<String>,
    /// `AlgorithmSpecification.ContainerArguments`, appended to the entrypoint.
    pub arguments: Vec<String>,
    /// `Environment`, added to the process environment.
    pub environment: BTreeMap<String, String>,
    /// `HyperParameters`, exposed SageMaker-style (`SM_HPS`, `SM_HP_<NAME>`).
    pub hyperparameters: BTreeMap<String, String>,
    /// `StoppingCondition.MaxRuntimeInSeconds`.
    pub max_runtime_seconds: Option<u64>,
    /// `CheckpointConfig.LocalPath`.
    pub checkpoint_local_path: Option<String>,
    /// `CheckpointConfig.S3Uri`.
    pub checkpoint_s3_uri: Option<String>,
    /// `AlgorithmSpecification.TrainingImage`: recorded, never pulled.
    pub training_image: Option<String>,
    /// `AlgorithmSpecification.TrainingInputMode`: `File` (default) or `FastFile`.
    pub input_mode: String,
    /// `InputDataConfig`: the channels under `/opt/ml/input/data/<ChannelName>`.
    pub channels: Vec<crate::Channel>,
    /// `OutputDataConfig.S3OutputPath`.
    pub output_path: Option<String>,
    /// `RoleArn`: whose credentials the attempt gets where the server hands out roles
    /// (recorded as sent: STS judges it).
    pub role_arn: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CreateTrainingJob {
    training_job_name: Option<String>,
    algorithm_specification: Option<AlgorithmSpecification>,
    resource_config: Option<ResourceConfig>,
    environment: Option<BTreeMap<String, String>>,
    hyper_parameters: Option<BTreeMap<String, String>>,
    stopping_condition: Option<StoppingCondition>,
    checkpoint_config: Option<CheckpointConfig>,
    input_data_config: Option<Vec<crate::channel::RawChannel>>,
    output_data_config: Option<crate::channel::OutputDataConfig>,
    role_arn: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct AlgorithmSpecification {
    training_image: Option<String>,
    container_entrypoint: Option<Vec<String>>,
    container_arguments: Option<Vec<String>>,
    training_input_mode: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ResourceConfig {
    instance_type: Option<String>,
    instance_count: Option<i64>,
    instance_groups: Option<serde_json::Value>,
    instance_preferences: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct StoppingCondition {
    max_runtime_in_seconds: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CheckpointConfig {
    #[serde(rename = "S3Uri")]
    s3_uri: Option<String>,
    local_path: Option<String>,
}

pub(crate) fn fail<T>(message: String) -> Result<T, ApiError> {
    Err(ApiError::client(message))
}

impl TrainingPayload {
    /// Reads the payload string of a SubmitServiceJob request.
    pub fn parse(json: &str) -> Result<Self, ApiError> {
        let mut de = serde_json::Deserializer::from_str(json);
        let request: CreateTrainingJob =
            serde_path_to_error::deserialize(&mut de).map_err(|err| {
                let path = err.path().to_string();
                let inner = err.into_inner();
                if inner.is_syntax() || inner.is_eof() || path == "." {
                    ApiError::client(format!(
                        "{FIELD} is not a JSON object ({inner}): pass the SageMaker \
                         CreateTrainingJob request as a JSON string"
                    ))
                } else if path.starts_with("HyperParameters.") {
                    ApiError::client(format!(
                        "{FIELD}.{path}: {inner}; SageMaker hyperparameter values are strings, \
                         so quote them"
                    ))
                } else {
                    ApiError::client(format!("{FIELD}.{path}: {inner}; fix that member"))
                }
            })?;
        de.end().map_err(|err| {
            ApiError::client(format!(
                "{FIELD} has text after its JSON object ({err}): pass exactly one object"
            ))
        })?;
        Self::from_request(request)
    }

    fn from_request(request: CreateTrainingJob) -> Result<Self, ApiError> {
        if let Some(name) = &request.training_job_name {
            training_job_name(name)?;
        }
        let resources = request.resource_config;
        let (instance_type, instance_count) = resource_config(resources)?;
        let algorithm = request.algorithm_specification;
        let (entrypoint, arguments, training_image, input_mode) = match algorithm {
            Some(a) => (
                a.container_entrypoint,
                a.container_arguments,
                a.training_image,
                a.training_input_mode,
            ),
            None => (None, None, None, None),
        };
        let input_mode = crate::channel::training_input_mode(input_mode)?;
        let channels = crate::channel::channels(request.input_data_config, &input_mode)?;
        let output_path = crate::channel::output_path(request.output_data_config)?;
        let entrypoint = container_entrypoint(entrypoint)?;
        let arguments = container_arguments(arguments)?;
        let environment = request.environment.unwrap_or_default();
        environment_map(&environment)?;
        let hyperparameters = request.hyper_parameters.unwrap_or_default();
        hyperparameter_map(&hyperparameters)?;
        let max_runtime_seconds = max_runtime_seconds(request.stopping_condition)?;
        let (checkpoint_local_path, checkpoint_s3_uri) = match request.checkpoint_config {
            Some(c) => checkpoint_config(c)?,
            None => (None, None),
        };
        Ok(TrainingPayload {
            training_job_name: request.training_job_name,
            instance_type,
            instance_count,
            entrypoint,
            arguments,
            environment,
            hyperparameters,
            max_runtime_seconds,
            checkpoint_local_path,
            checkpoint_s3_uri,
            training_image,
            input_mode,
            channels,
            output_path,
            role_arn: request.role_arn,
        })
    }

    /// The command line of an attempt: the entrypoint followed by the arguments.
    pub fn command(&self) -> Vec<String> {
        self.entrypoint
            .iter()
            .chain(self.arguments.iter())
            .cloned()
            .collect()
    }
}

fn training_job_name(name: &str) -> Result<(), ApiError> {
    let ok = (1..=63).contains(&name.len())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !ok {
        return fail(format!(
            "{FIELD}.TrainingJobName {} must be 1 to 63 letters, digits and hyphens, starting \
             and ending with a letter or digit",
            shown(name)
        ));
    }
    Ok(())
}

fn resource_config(resources: Option<ResourceConfig>) -> Result<(String, u32), ApiError> {
    let at = format!("{FIELD}.ResourceConfig");
    let Some(resources) = resources else {
        return fail(format!(
            "{at} is missing: give {{InstanceType, InstanceCount}}; the instance type is the \
             capacity unit the job is counted against and the count is how many it needs"
        ));
    };
    if resources
        .instance_groups
        .as_ref()
        .is_some_and(|v| !v.is_null())
    {
        return fail(format!(
            "{at}.InstanceGroups: heterogeneous clusters are not supported: give one \
             InstanceType and an InstanceCount instead"
        ));
    }
    if resources
        .instance_preferences
        .as_ref()
        .is_some_and(|v| !v.is_null())
    {
        return fail(format!(
            "{at}.InstancePreferences: instance preferences are not supported: give one \
             InstanceType and an InstanceCount instead"
        ));
    }
    let instance_type = match resources.instance_type {
        Some(t) if !t.trim().is_empty() => t,
        _ => {
            return fail(format!(
                "{at}.InstanceType is missing: give the instance type, e.g. ml.g5.xlarge; it is \
                 the capacity unit the job's instances are counted against in its quota share \
                 and service environment"
            ))
        }
    };
    let count = match resources.instance_count {
        Some(n) => n,
        None => {
            return fail(format!(
                "{at}.InstanceCount is missing: give how many instances of {instance_type} the \
                 job needs (at least 1)"
            ))
        }
    };
    let Ok(count) = u32::try_from(count) else {
        return fail(format!(
            "{at}.InstanceCount is {count}: give at least 1 instance"
        ));
    };
    if count == 0 {
        return fail(format!("{at}.InstanceCount is 0: give at least 1 instance"));
    }
    Ok((instance_type, count))
}

fn container_entrypoint(entrypoint: Option<Vec<String>>) -> Result<Vec<String>, ApiError> {
    let at = format!("{FIELD}.AlgorithmSpecification.ContainerEntrypoint");
    // Missing: the image's own entrypoint, which only a runtime that runs images can serve;
    // the server refuses it at submit otherwise (a live check: it depends on the runtime).
    let Some(entrypoint) = entrypoint else {
        return Ok(Vec::new());
    };
    if entrypoint.is_empty() {
        return fail(format!(
            "{at} is empty: name the program to run, e.g. [\"python3\", \"train.py\"], or leave it out to run the image's own entrypoint"
        ));
    }
    if entrypoint.len() > 100 {
        return fail(format!(
            "{at} has {} entries: give at most 100",
            entrypoint.len()
        ));
    }
    if entrypoint[0].trim().is_empty() {
        return fail(format!("{at}[0] is empty: it must name the program to run"));
    }
    for (i, word) in entrypoint.iter().enumerate() {
        no_nul(&format!("{at}[{i}]"), word)?;
    }
    Ok(entrypoint)
}

/// `AlgorithmSpecification.ContainerArguments`: at most 100, none with NUL.
fn container_arguments(arguments: Option<Vec<String>>) -> Result<Vec<String>, ApiError> {
    let arguments = arguments.unwrap_or_default();
    if arguments.len() > 100 {
        return fail(format!(
            "{FIELD}.AlgorithmSpecification.ContainerArguments has {} entries: give at most \
             100",
            arguments.len()
        ));
    }
    for (i, a) in arguments.iter().enumerate() {
        no_nul(
            &format!("{FIELD}.AlgorithmSpecification.ContainerArguments[{i}]"),
            a,
        )?;
    }
    Ok(arguments)
}

/// `StoppingCondition.MaxRuntimeInSeconds`, when given: 1 to 28 days.
fn max_runtime_seconds(condition: Option<StoppingCondition>) -> Result<Option<u64>, ApiError> {
    match condition {
        Some(StoppingCondition {
            max_runtime_in_seconds: Some(seconds),
        }) => {
            if !(1..=MAX_RUNTIME_SECONDS).contains(&seconds) {
                return fail(format!(
                    "{FIELD}.StoppingCondition.MaxRuntimeInSeconds is {seconds}: give 1 to \
                     {MAX_RUNTIME_SECONDS} seconds (28 days, SageMaker's limit)"
                ));
            }
            Ok(Some(seconds as u64))
        }
        _ => Ok(None),
    }
}

/// A process's argv and environment are C strings: a NUL byte cannot reach the job, so it is
/// refused here rather than failing the attempt later.
fn no_nul(field: &str, value: &str) -> Result<(), ApiError> {
    if value.contains('\0') {
        return fail(format!(
            "{field} contains a NUL byte, which a process's arguments and environment cannot carry: remove it"
        ));
    }
    Ok(())
}

/// SageMaker's ceiling on `StoppingCondition.MaxRuntimeInSeconds`: 28 days.
pub const MAX_RUNTIME_SECONDS: i64 = 28 * 24 * 3600;

fn environment_map(environment: &BTreeMap<String, String>) -> Result<(), ApiError> {
    let at = format!("{FIELD}.Environment");
    if environment.len() > 100 {
        return fail(format!(
            "{at} has {} variables: give at most 100",
            environment.len()
        ));
    }
    for (key, value) in environment {
        let ok = key.len() <= 512
            && key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return fail(format!(
                "{at}: the variable name {} must match [a-zA-Z_][a-zA-Z0-9_]* (at most 512 \
                 characters)",
                shown(key)
            ));
        }
        if value.len() > 512 {
            return fail(format!(
                "{at}.{key} is {} bytes long: give at most 512",
                value.len()
            ));
        }
        no_nul(&format!("{at}.{key}"), value)?;
    }
    Ok(())
}

fn hyperparameter_map(hyperparameters: &BTreeMap<String, String>) -> Result<(), ApiError> {
    let at = format!("{FIELD}.HyperParameters");
    if hyperparameters.len() > 100 {
        return fail(format!(
            "{at} has {} entries: give at most 100",
            hyperparameters.len()
        ));
    }
    for (key, value) in hyperparameters {
        if key.is_empty() || key.chars().count() > 256 {
            return fail(format!(
                "{at}: the name {} must be 1 to 256 characters",
                shown(key)
            ));
        }
        if value.chars().count() > 2500 {
            return fail(format!(
                "{at}.{key} is longer than 2500 characters: shorten it"
            ));
        }
        no_nul(&format!("{at}: the name {}", shown(key)), key)?;
        no_nul(&format!("{at}.{key}"), value)?;
    }
    Ok(())
}

fn checkpoint_config(
    config: CheckpointConfig,
) -> Result<(Option<String>, Option<String>), ApiError> {
    let at = format!("{FIELD}.CheckpointConfig");
    if let Some(uri) = &config.s3_uri {
        // https:// was accepted before storage was built, so it stays accepted (a log that
        // holds one must replay); the executor's storage refuses it at launch, saying to use
        // s3://.
        let ok =
            crate::channel::storage_uri(uri) || (uri.len() <= 1024 && uri.starts_with("https://"));
        if !ok {
            return fail(format!(
                "{at}.S3Uri {} must be s3://bucket/prefix or file:///absolute/path, at most 1024 characters",
                shown(uri)
            ));
        }
    }
    if let Some(path) = &config.local_path {
        if path.trim().is_empty() || path.len() > 4096 {
            return fail(format!(
                "{at}.LocalPath must be a path of 1 to 4096 characters, e.g. /opt/ml/checkpoints"
            ));
        }
        if leaves_its_base(path) {
            return fail(format!(
                "{at}.LocalPath {} leaves the job's directory through '..': a checkpoint path is the job's own (absolute paths count from the job's root, relative ones from its working directory); remove the '..' components, e.g. /opt/ml/checkpoints",
                shown(path)
            ));
        }
    }
    Ok((config.local_path, config.s3_uri))
}

/// Whether `..` components take `path` above where it starts (the job's root or working
/// directory, where the executor puts it); `a/../b` stays inside.
fn leaves_its_base(path: &str) -> bool {
    let mut depth = 0u32;
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return true,
            },
            _ => depth += 1,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_paths_that_climb_out_of_the_job_are_refused_and_the_field_named() {
        for bad in [
            "../../../../x",
            "../../0b9d/checkpoints",
            "/../etc",
            "a/../../b",
        ] {
            let e = checkpoint_config(CheckpointConfig {
                local_path: Some(bad.into()),
                s3_uri: None,
            })
            .unwrap_err();
            assert!(
                e.to_string().contains("CheckpointConfig.LocalPath"),
                "{bad}: {e}"
            );
        }
        for good in ["/opt/ml/checkpoints", "ckpt", "a/../b", "./x/."] {
            assert!(!leaves_its_base(good), "{good}");
        }
    }

    /// The minimal example of the AWS docs, with an entrypoint.
    const MINIMAL: &str = r#"{
        "TrainingJobName": "my-training-job",
        "RoleArn": "arn:aws:iam::123456789012:role/SageMakerRole",
        "AlgorithmSpecification": {
            "TrainingInputMode": "File",
            "TrainingImage": "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5",
            "ContainerEntrypoint": ["echo", "hello world"]
        },
        "ResourceConfig": {"InstanceType": "ml.c5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 1},
        "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
        "StoppingCondition": {"MaxRuntimeInSeconds": 30}
    }"#;

    fn with(patch: serde_json::Value) -> String {
        let mut base: serde_json::Value = serde_json::from_str(MINIMAL).unwrap();
        merge(&mut base, patch);
        base.to_string()
    }

    fn merge(base: &mut serde_json::Value, patch: serde_json::Value) {
        match (base, patch) {
            (serde_json::Value::Object(b), serde_json::Value::Object(p)) => {
                for (k, v) in p {
                    if v.is_null() {
                        b.remove(&k);
                    } else {
                        merge(b.entry(k).or_insert(serde_json::Value::Null), v);
                    }
                }
            }
            (b, p) => *b = p,
        }
    }

    fn err(json: &str) -> String {
        TrainingPayload::parse(json)
            .unwrap_err()
            .message()
            .to_string()
    }

    #[test]
    fn channels_and_the_output_path_are_read_with_their_defaults() {
        let p = TrainingPayload::parse(&with(serde_json::json!({
            "AlgorithmSpecification": {"TrainingInputMode": "FastFile"},
            "InputDataConfig": [
                {"ChannelName": "train", "ContentType": "text/csv", "CompressionType": "Gzip",
                 "DataSource": {"S3DataSource": {"S3Uri": "s3://b/train/", "S3DataType": "S3Prefix",
                                                 "S3DataDistributionType": "ShardedByS3Key"}}},
                {"ChannelName": "sm_drivers", "InputMode": "File",
                 "DataSource": {"S3DataSource": {"S3Uri": "file:///srv/drivers"}}}
            ]
        })))
        .unwrap();
        assert_eq!(p.input_mode, "FastFile");
        assert_eq!(p.output_path.as_deref(), Some("s3://bucket/out"));
        let [train, drivers] = &p.channels[..] else {
            panic!("two channels: {:?}", p.channels)
        };
        assert_eq!(
            (
                train.name.as_str(),
                train.uri.as_str(),
                train.distribution.as_str(),
                train.input_mode.as_str()
            ),
            ("train", "s3://b/train/", "ShardedByS3Key", "FastFile")
        );
        assert_eq!(
            (train.content_type.as_deref(), train.compression.as_deref()),
            (Some("text/csv"), Some("Gzip"))
        );
        assert_eq!(
            (
                drivers.data_type.as_str(),
                drivers.distribution.as_str(),
                drivers.input_mode.as_str()
            ),
            ("S3Prefix", "FullyReplicated", "File")
        );
        assert_eq!(TrainingPayload::parse(MINIMAL).unwrap().input_mode, "File");
    }

    #[test]
    #[expect(
        clippy::too_many_lines,
        reason = "one table of refused channels, each case next to its message"
    )]
    fn channels_that_cannot_be_served_or_would_leave_the_job_are_refused_naming_the_member() {
        let channel = |c: serde_json::Value| with(serde_json::json!({"InputDataConfig": [c]}));
        let s3 = |uri: &str| serde_json::json!({"S3DataSource": {"S3Uri": uri}});
        for (payload, want) in [
            (
                channel(serde_json::json!({"ChannelName": "..", "DataSource": s3("s3://b/x")})),
                "InputDataConfig[0].ChannelName '..' must be",
            ),
            (
                channel(serde_json::json!({"ChannelName": "a/b", "DataSource": s3("s3://b/x")})),
                "InputDataConfig[0].ChannelName 'a/b' must be",
            ),
            (
                channel(serde_json::json!({"ChannelName": "t", "DataSource": s3("http://b/x")})),
                "S3Uri 'http://b/x' must be s3://",
            ),
            (
                channel(serde_json::json!({"ChannelName": "t", "DataSource": s3("file://rel")})),
                "S3Uri 'file://rel' must be",
            ),
            (
                channel(
                    serde_json::json!({"ChannelName": "t", "InputMode": "Pipe", "DataSource": s3("s3://b/x")}),
                ),
                "InputDataConfig[0].InputMode is Pipe, which Quartermaster does not serve",
            ),
            (
                channel(
                    serde_json::json!({"ChannelName": "t", "DataSource": {"FileSystemDataSource": {}}}),
                ),
                "FileSystemDataSource (EFS, FSx) is not supported",
            ),
            (
                channel(serde_json::json!({"ChannelName": "t"})),
                "S3DataSource is required",
            ),
            (
                channel(
                    serde_json::json!({"ChannelName": "t", "DataSource": {"S3DataSource":
                {"S3Uri": "s3://b/x", "S3DataType": "AugmentedManifestFile"}}}),
                ),
                "S3DataType is 'AugmentedManifestFile': give S3Prefix or ManifestFile",
            ),
            (
                with(serde_json::json!({"AlgorithmSpecification": {"TrainingInputMode": "Pipe"}})),
                "TrainingInputMode is Pipe",
            ),
            (
                with(serde_json::json!({"OutputDataConfig": {"S3OutputPath": "/tmp/out"}})),
                "OutputDataConfig.S3OutputPath '/tmp/out' must be",
            ),
            (
                with(serde_json::json!({"InputDataConfig": [
                {"ChannelName": "t", "DataSource": s3("s3://b/x")},
                {"ChannelName": "t", "DataSource": s3("s3://b/y")}]})),
                "InputDataConfig[1].ChannelName 't' is also InputDataConfig[0]'s",
            ),
            (
                with(serde_json::json!({"InputDataConfig": [
                {"ChannelName": "train.v2", "DataSource": s3("s3://b/x")},
                {"ChannelName": "TRAIN-V2", "DataSource": s3("s3://b/y")}]})),
                "'TRAIN-V2' and InputDataConfig[0]'s 'train.v2' are both SM_CHANNEL_TRAIN_V2",
            ),
        ] {
            let e = err(&payload);
            assert!(e.contains(want), "{payload}: {e}");
        }
        let many: Vec<serde_json::Value> = (0..21)
            .map(|i| serde_json::json!({"ChannelName": format!("c{i}"), "DataSource": s3("s3://b/x")}))
            .collect();
        let e = err(&with(serde_json::json!({"InputDataConfig": many})));
        assert!(e.contains("has 21 channels: give at most 20"), "{e}");
    }

    #[test]
    fn the_minimal_documented_payload_is_read() {
        let p = TrainingPayload::parse(MINIMAL).unwrap();
        assert_eq!(p.training_job_name.as_deref(), Some("my-training-job"));
        assert_eq!(p.instance_type, "ml.c5.xlarge");
        assert_eq!(p.instance_count, 1);
        assert_eq!(p.entrypoint, vec!["echo", "hello world"]);
        assert_eq!(p.max_runtime_seconds, Some(30));
        assert!(p.training_image.is_some());
        assert_eq!(p.command(), vec!["echo", "hello world"]);
    }

    #[test]
    fn arguments_environment_hyperparameters_and_checkpoints_are_read() {
        let p = TrainingPayload::parse(&with(serde_json::json!({
            "AlgorithmSpecification": {"ContainerArguments": ["--epochs", "3"]},
            "Environment": {"MODE": "fast", "_X1": ""},
            "HyperParameters": {"lr": "0.1"},
            "CheckpointConfig": {"S3Uri": "s3://b/ckpt", "LocalPath": "/opt/ml/checkpoints"},
            "ResourceConfig": {"InstanceCount": 4}
        })))
        .unwrap();
        assert_eq!(p.arguments, vec!["--epochs", "3"]);
        assert_eq!(p.command().len(), 4);
        assert_eq!(p.environment.get("MODE").map(String::as_str), Some("fast"));
        assert_eq!(p.hyperparameters.get("lr").map(String::as_str), Some("0.1"));
        assert_eq!(p.checkpoint_s3_uri.as_deref(), Some("s3://b/ckpt"));
        assert_eq!(
            p.checkpoint_local_path.as_deref(),
            Some("/opt/ml/checkpoints")
        );
        assert_eq!(p.instance_count, 4);
    }

    #[test]
    fn a_missing_entrypoint_is_the_image_s_own_and_an_empty_one_is_refused() {
        // Whether the image's entrypoint can run depends on the server's runtime: the server
        // refuses it at submit under the host runtime (tests/e2e/test_podman.py).
        let p = TrainingPayload::parse(&with(serde_json::json!({
            "AlgorithmSpecification": {"ContainerEntrypoint": null}
        })))
        .unwrap();
        assert!(p.entrypoint.is_empty());
        let m = err(&with(serde_json::json!({
            "AlgorithmSpecification": {"ContainerEntrypoint": []}
        })));
        assert!(
            m.starts_with(
                "serviceRequestPayload.AlgorithmSpecification.ContainerEntrypoint is empty"
            ),
            "{m}"
        );
    }

    #[test]
    fn a_missing_instance_type_explains_it_is_the_capacity_unit() {
        let m = err(&with(
            serde_json::json!({"ResourceConfig": {"InstanceType": null}}),
        ));
        assert!(m.starts_with("serviceRequestPayload.ResourceConfig.InstanceType is missing"));
        assert!(m.contains("capacity unit"), "{m}");
        let m = err(&with(serde_json::json!({"ResourceConfig": null})));
        assert!(
            m.starts_with("serviceRequestPayload.ResourceConfig is missing"),
            "{m}"
        );
    }

    #[test]
    fn an_instance_count_below_one_or_missing_is_refused() {
        let m = err(&with(
            serde_json::json!({"ResourceConfig": {"InstanceCount": 0}}),
        ));
        assert!(
            m.starts_with("serviceRequestPayload.ResourceConfig.InstanceCount is 0"),
            "{m}"
        );
        let m = err(&with(
            serde_json::json!({"ResourceConfig": {"InstanceCount": -2}}),
        ));
        assert!(m.contains("InstanceCount is -2"), "{m}");
        let m = err(&with(
            serde_json::json!({"ResourceConfig": {"InstanceCount": null}}),
        ));
        assert!(m.contains("InstanceCount is missing"), "{m}");
    }

    #[test]
    fn heterogeneous_clusters_and_instance_preferences_are_refused() {
        let m = err(&with(serde_json::json!({
            "ResourceConfig": {"InstanceGroups": [{"InstanceType": "ml.g5.xlarge"}]}
        })));
        assert!(
            m.contains("InstanceGroups: heterogeneous clusters are not supported"),
            "{m}"
        );
        assert!(m.contains("InstanceType and an InstanceCount"), "{m}");
        let m = err(&with(serde_json::json!({
            "ResourceConfig": {"InstancePreferences": [{"InstanceType": "ml.g5.xlarge"}]}
        })));
        assert!(m.contains("InstancePreferences: instance preferences are not supported"));
    }

    #[test]
    fn invalid_json_names_the_payload_field() {
        let m = err("{not json");
        assert!(
            m.starts_with("serviceRequestPayload is not a JSON object"),
            "{m}"
        );
        let m = err("\"a string\"");
        assert!(
            m.starts_with("serviceRequestPayload is not a JSON object"),
            "{m}"
        );
    }

    #[test]
    fn numeric_hyperparameters_are_refused_with_a_hint_to_quote_them() {
        let m = err(&with(
            serde_json::json!({"HyperParameters": {"epochs": 10}}),
        ));
        assert!(m.starts_with("serviceRequestPayload.HyperParameters.epochs: invalid type"));
        assert!(m.contains("quote them"), "{m}");
    }

    #[test]
    fn nul_bytes_that_no_process_can_carry_are_refused_naming_the_field() {
        for (payload, field) in [
            (
                serde_json::json!({"Environment": {"A": "x\u{0}y"}}),
                "Environment.A",
            ),
            (
                serde_json::json!({"HyperParameters": {"lr": "0.1\u{0}"}}),
                "HyperParameters.lr",
            ),
            (
                serde_json::json!({"AlgorithmSpecification": {"TrainingInputMode": "File",
                    "ContainerEntrypoint": ["python3"], "ContainerArguments": ["a", "b\u{0}"]}}),
                "ContainerArguments[1]",
            ),
        ] {
            let m = err(&with(payload));
            assert!(m.contains(field) && m.contains("NUL byte"), "{m}");
        }
    }

    #[test]
    fn a_runtime_beyond_sagemaker_s_28_days_is_refused_before_it_can_overflow_a_timer() {
        for seconds in [i64::MAX, MAX_RUNTIME_SECONDS + 1] {
            let m = err(&with(
                serde_json::json!({"StoppingCondition": {"MaxRuntimeInSeconds": seconds}}),
            ));
            assert!(m.contains("give 1 to 2419200 seconds"), "{m}");
        }
        let ok = with(
            serde_json::json!({"StoppingCondition": {"MaxRuntimeInSeconds": MAX_RUNTIME_SECONDS}}),
        );
        assert!(TrainingPayload::parse(&ok).is_ok());
    }

    #[test]
    fn a_bad_environment_variable_name_is_refused() {
        let m = err(&with(serde_json::json!({"Environment": {"1BAD": "x"}})));
        assert!(m.starts_with("serviceRequestPayload.Environment: the variable name '1BAD'"));
    }

    #[test]
    fn too_many_environment_variables_are_refused() {
        let env: serde_json::Map<String, serde_json::Value> =
            (0..101).map(|i| (format!("V{i}"), "x".into())).collect();
        let m = err(&with(serde_json::json!({"Environment": env})));
        assert!(m.contains("Environment has 101 variables"), "{m}");
    }

    #[test]
    fn a_runtime_below_one_second_is_refused() {
        let m = err(&with(
            serde_json::json!({"StoppingCondition": {"MaxRuntimeInSeconds": 0}}),
        ));
        assert!(
            m.contains("StoppingCondition.MaxRuntimeInSeconds is 0"),
            "{m}"
        );
    }

    #[test]
    fn a_bad_training_job_name_or_checkpoint_uri_is_refused() {
        let m = err(&with(serde_json::json!({"TrainingJobName": "bad_name"})));
        assert!(
            m.starts_with("serviceRequestPayload.TrainingJobName 'bad_name'"),
            "{m}"
        );
        let m = err(&with(
            serde_json::json!({"CheckpointConfig": {"S3Uri": "ftp://x/y"}}),
        ));
        assert!(m.contains("CheckpointConfig.S3Uri 'ftp://x/y'"), "{m}");
    }

    #[test]
    fn a_wrongly_typed_member_is_named_by_its_path() {
        let m = err(&with(
            serde_json::json!({"ResourceConfig": {"InstanceCount": "two"}}),
        ));
        assert!(m.starts_with("serviceRequestPayload.ResourceConfig.InstanceCount: invalid type"));
    }
}
