//! The environment of an attempt's processes: the server's own environment, then the payload's
//! `Environment`, then the SageMaker-style variables, which win because the executor, not the
//! payload, knows the hosts, GPUs and directories of this attempt.

use std::collections::BTreeMap;
use std::path::Path;

use crate::layout::JobLayout;
use crate::LaunchSpec;

/// `SM_HP_<NAME>`: the name upper-cased, every non-alphanumeric character replaced by `_`.
pub(crate) fn hyperparameter_var(name: &str) -> String {
    prefixed_var("SM_HP_", name)
}

/// `prefix` and `name` upper-cased, every character a variable name cannot hold made `_`.
pub(crate) fn prefixed_var(prefix: &str, name: &str) -> String {
    let mut var = String::with_capacity(prefix.len() + name.len());
    var.push_str(prefix);
    var.extend(name.chars().map(|c| {
        if c.is_ascii_alphanumeric() {
            c.to_ascii_uppercase()
        } else {
            '_'
        }
    }));
    var
}

/// Whether `name` can be a variable of a shell or of `podman --env-file`: a letter or `_`,
/// then letters, digits and `_`.
pub(crate) fn valid_var(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The host name of the 1-based host `i`.
pub fn host_name(i: u32) -> String {
    format!("algo-{i}")
}

/// Variables that are the same for every host of the attempt, payload `Environment` first so
/// that the executor's variables override it.
pub(crate) fn common(
    spec: &LaunchSpec,
    layout: &JobLayout,
    checkpoint_dir: &Path,
) -> Vec<(String, String)> {
    let mut vars: Vec<(String, String)> = spec
        .environment
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let hosts: Vec<String> = (1..=spec.count).map(host_name).collect();
    let hps: &BTreeMap<String, String> = &spec.hyperparameters;
    vars.push((
        "SM_HPS".into(),
        serde_json::to_string(hps).unwrap_or_default(),
    ));
    vars.extend(hps.iter().map(|(k, v)| (hyperparameter_var(k), v.clone())));
    let path = |p: &Path| p.to_string_lossy().into_owned();
    vars.extend([
        ("SM_CHECKPOINT_DIR".into(), path(checkpoint_dir)),
        ("SM_MODEL_DIR".into(), path(&layout.model)),
        ("SM_OUTPUT_DIR".into(), path(&layout.output)),
        ("SM_OUTPUT_DATA_DIR".into(), path(&layout.output_data)),
        (
            "SM_HOSTS".into(),
            serde_json::to_string(&hosts).unwrap_or_default(),
        ),
        ("SM_TRAINING_JOB_NAME".into(), spec.job_name.clone()),
        ("TRAINING_JOB_NAME".into(), spec.job_name.clone()),
        (
            "SM_CURRENT_INSTANCE_TYPE".into(),
            spec.instance_type.clone(),
        ),
        ("QM_JOB_ID".into(), spec.job_id.clone()),
        ("QM_ATTEMPT".into(), spec.attempt_number.to_string()),
        ("QM_PROGRESS_FILE".into(), path(&layout.progress_file())),
    ]);
    vars.extend(crate::input::variables(spec, layout));
    // After the payload's: a job cannot point its SDK elsewhere by its Environment.
    if let Some(c) = &spec.credentials {
        vars.extend(c.variables());
    }
    vars
}

/// Variables of the 1-based host `host` holding `gpus` (nvidia-smi's indices, which follow
/// the PCI bus order: `CUDA_DEVICE_ORDER=PCI_BUS_ID` makes CUDA number them so too, rather
/// than fastest first, so that `CUDA_VISIBLE_DEVICES` names the GPUs the host was given).
pub(crate) fn per_host(
    spec: &LaunchSpec,
    layout: &JobLayout,
    host: u32,
    gpus: &[u32],
) -> [(&'static str, String); 6] {
    let visible: Vec<String> = gpus.iter().map(u32::to_string).collect();
    let config = crate::input::config_dir(layout, host);
    [
        ("CUDA_VISIBLE_DEVICES", visible.join(",")),
        ("SM_NUM_GPUS", gpus.len().to_string()),
        ("SM_CURRENT_HOST", host_name(host)),
        (
            "SM_RESOURCE_CONFIG",
            crate::input::resource_config(spec, host).to_string(),
        ),
        ("SM_INPUT_CONFIG_DIR", config.to_string_lossy().into_owned()),
        ("CUDA_DEVICE_ORDER", "PCI_BUS_ID".to_string()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use qm_core::AttemptId;

    #[test]
    fn hyperparameter_names_become_upper_case_identifiers() {
        assert_eq!(hyperparameter_var("learning-rate"), "SM_HP_LEARNING_RATE");
        assert_eq!(hyperparameter_var("batch.size2"), "SM_HP_BATCH_SIZE2");
    }

    #[test]
    fn a_host_without_gpus_sees_an_empty_device_list() {
        let spec = LaunchSpec::new(AttemptId(1), "j", "ml.g5.xlarge", vec!["true".into()]);
        let layout = JobLayout::new(Path::new("/data"), "j", 1);
        assert_eq!(per_host(&spec, &layout, 2, &[])[0].1, "");
        assert_eq!(per_host(&spec, &layout, 1, &[3, 1])[0].1, "3,1");
        assert_eq!(per_host(&spec, &layout, 1, &[3, 1])[5].1, "PCI_BUS_ID");
        assert_eq!(per_host(&spec, &layout, 1, &[3, 1])[2].1, "algo-1");
        assert!(per_host(&spec, &layout, 1, &[])[3]
            .1
            .contains(r#""current_host":"algo-1""#));
        assert_eq!(
            per_host(&spec, &layout, 2, &[])[4].1,
            "/data/jobs/j/input/config-algo-2"
        );
    }
}
