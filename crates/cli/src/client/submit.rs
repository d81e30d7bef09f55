//! `qm submit`: the SubmitServiceJob request, with a SageMaker `CreateTrainingJob` payload
//! either built from flags (the command after `--` becomes `ContainerEntrypoint`) or read
//! from a file, with the flags given overriding the file.

use qm_api::{ServiceJobType, SubmitServiceJobRequest};
use serde_json::{json, Map, Value};

/// The instance type of a job submitted without `--instance-type` or a payload file.
pub const DEFAULT_INSTANCE_TYPE: &str = "ml.g5.xlarge";

/// What the user asked for on the command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubmitSpec {
    /// The queue.
    pub queue: String,
    /// The quota share.
    pub share: String,
    /// The job name (also the training job name of a built payload).
    pub name: String,
    /// The scheduling priority, if given.
    pub priority: Option<i32>,
    /// `--instance-type`.
    pub instance_type: Option<String>,
    /// `--count`.
    pub count: Option<u32>,
    /// The command after `--`: entrypoint and arguments.
    pub command: Vec<String>,
    /// `--class`: the job's class (its tag `qm:class`).
    pub class: Option<String>,
}

/// Builds the request. `payload_file` is the parsed contents of `--payload`, if given.
pub fn request(
    spec: &SubmitSpec,
    payload_file: Option<Value>,
) -> Result<SubmitServiceJobRequest, String> {
    let payload = payload(spec, payload_file)?;
    Ok(SubmitServiceJobRequest {
        job_name: spec.name.clone(),
        job_queue: spec.queue.clone(),
        retry_strategy: None,
        scheduling_priority: spec.priority,
        service_request_payload: payload.to_string(),
        service_job_type: ServiceJobType::SagemakerTraining,
        share_identifier: None,
        quota_share_name: Some(spec.share.clone()),
        preemption_configuration: None,
        timeout_config: None,
        tags: spec.class.as_ref().map(|c| {
            [(qm_api::class::TAG_CLASS.to_string(), c.clone())]
                .into_iter()
                .collect()
        }),
        client_token: None,
    })
}

/// The `CreateTrainingJob` payload.
pub fn payload(spec: &SubmitSpec, file: Option<Value>) -> Result<Value, String> {
    let from_file = file.is_some();
    let mut root = match file {
        Some(Value::Object(map)) => map,
        Some(_) => return Err("the payload file must hold a JSON object".to_string()),
        None => {
            if spec.command.is_empty() {
                return Err(
                    "give the command to run after `--` (qm submit ... -- python3 \
                            train.py), or a SageMaker payload with --payload FILE.json"
                        .to_string(),
                );
            }
            let mut map = Map::new();
            map.insert("TrainingJobName".into(), json!(spec.name));
            map
        }
    };
    if !spec.command.is_empty() {
        let algorithm = object_entry(&mut root, "AlgorithmSpecification")?;
        algorithm
            .entry("TrainingInputMode")
            .or_insert_with(|| json!("File"));
        algorithm.insert("ContainerEntrypoint".into(), json!([spec.command[0]]));
        algorithm.insert("ContainerArguments".into(), json!(spec.command[1..]));
    }
    let resources = object_entry(&mut root, "ResourceConfig")?;
    if let Some(t) = &spec.instance_type {
        resources.insert("InstanceType".into(), json!(t));
    } else if !from_file || !resources.contains_key("InstanceType") {
        resources
            .entry("InstanceType")
            .or_insert_with(|| json!(DEFAULT_INSTANCE_TYPE));
    }
    if let Some(c) = spec.count {
        resources.insert("InstanceCount".into(), json!(c));
    } else {
        resources.entry("InstanceCount").or_insert_with(|| json!(1));
    }
    Ok(Value::Object(root))
}

fn object_entry<'a>(
    root: &'a mut Map<String, Value>,
    key: &str,
) -> Result<&'a mut Map<String, Value>, String> {
    root.entry(key)
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or_else(|| format!("{key} in the payload file must be a JSON object"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(command: &[&str]) -> SubmitSpec {
        SubmitSpec {
            queue: "training".into(),
            share: "research".into(),
            name: "train-1".into(),
            command: command.iter().map(|s| s.to_string()).collect(),
            ..SubmitSpec::default()
        }
    }

    #[test]
    fn the_command_becomes_the_container_entrypoint_and_arguments() {
        let p = payload(&spec(&["python3", "train.py", "--lr", "0.1"]), None).unwrap();
        assert_eq!(
            p,
            json!({
                "TrainingJobName": "train-1",
                "AlgorithmSpecification": {"TrainingInputMode": "File",
                    "ContainerEntrypoint": ["python3"],
                    "ContainerArguments": ["train.py", "--lr", "0.1"]},
                "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1}
            })
        );
    }

    #[test]
    fn flags_override_the_payload_file() {
        let mut s = spec(&[]);
        s.count = Some(2);
        let file = json!({"ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 1},
                          "AlgorithmSpecification": {"ContainerEntrypoint": ["true"]}});
        let p = payload(&s, Some(file)).unwrap();
        assert_eq!(
            p["ResourceConfig"],
            json!({"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2})
        );
        assert_eq!(
            p["AlgorithmSpecification"]["ContainerEntrypoint"],
            json!(["true"])
        );
    }

    #[test]
    fn a_submission_without_command_or_payload_is_refused() {
        assert!(payload(&spec(&[]), None)
            .unwrap_err()
            .contains("after `--`"));
    }
}
