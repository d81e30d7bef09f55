//! The input side of the SageMaker training contract (AWS's "How Amazon SageMaker AI provides
//! training information"; docs/sagemaker.md): `input/config/hyperparameters.json`,
//! `inputdataconfig.json` and, where the executor knows the hosts, `resourceconfig.json`, and a
//! directory per channel under `input/data/`. Written by the server before every attempt, so a
//! file the previous attempt changed or replaced by a link is replaced, never followed.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::environment::host_name;
use crate::layout::{JobDir, JobLayout};
use crate::{isolation, LaunchSpec};

/// `inputdataconfig.json`: one object per channel, in SageMaker's member names.
pub(crate) fn input_data_config(spec: &LaunchSpec) -> Value {
    let channels: serde_json::Map<String, Value> = spec
        .channels
        .iter()
        .map(|c| {
            let mut v = json!({
                "TrainingInputMode": c.input_mode,
                "S3DistributionType": c.distribution,
                "RecordWrapperType": c.record_wrapper.as_deref().unwrap_or("None"),
            });
            if let Some(t) = &c.content_type {
                v["ContentType"] = json!(t);
            }
            if let Some(t) = &c.compression {
                v["CompressionType"] = json!(t);
            }
            (c.name.clone(), v)
        })
        .collect();
    Value::Object(channels)
}

/// `resourceconfig.json` of host `algo-<host>` (1-based), one homogeneous group of hosts.
pub(crate) fn resource_config(spec: &LaunchSpec, host: u32) -> Value {
    let hosts: Vec<String> = (1..=spec.count).map(host_name).collect();
    json!({
        "current_host": host_name(host),
        "current_instance_type": spec.instance_type,
        "current_group_name": "homogeneousCluster",
        "hosts": hosts,
        "instance_groups": [{
            "instance_group_name": "homogeneousCluster",
            "instance_type": spec.instance_type,
            "hosts": hosts,
        }],
        "network_interface_name": "lo",
    })
}

/// The channel directory of `name` (a checked plain name).
pub(crate) fn channel_dir(layout: &JobLayout, name: &str) -> PathBuf {
    layout.input_data.join(name)
}

/// The config directory of host `algo-<host>`: `input/config`, and for hosts 2 and up
/// `input/config-algo-<host>` (each host's `resourceconfig.json` names it as the current host).
pub(crate) fn config_dir(layout: &JobLayout, host: u32) -> PathBuf {
    if host <= 1 {
        layout.input_config.clone()
    } else {
        layout.input.join(format!("config-algo-{host}"))
    }
}

/// Writes the config directories afresh, one per host of `hosts` with its
/// `resourceconfig.json` (`None`: one directory without it, where the executor does not name
/// the hosts), and makes the channel directories; all handed to `owner` when given. An
/// earlier attempt's config directories are removed first (a fresh job directory has none).
/// Returns the path that failed.
pub(crate) fn prepare(
    layout: &JobLayout,
    spec: &LaunchSpec,
    hosts: Option<u32>,
    job_dir: JobDir,
    owner: Option<u32>,
) -> Result<(), (PathBuf, io::Error)> {
    if job_dir == JobDir::Earlier {
        remove_config_dirs(layout).map_err(|e| (layout.input.clone(), e))?;
    }
    for host in 1..=hosts.unwrap_or(1).max(1) {
        let dir = config_dir(layout, host);
        let rel = dir
            .strip_prefix(&layout.job)
            .expect("in the job's directory");
        isolation::real_dirs(&layout.job, rel, true, owner).map_err(|e| (dir.clone(), e))?;
        let mut files = vec![
            ("hyperparameters.json", json!(spec.hyperparameters)),
            ("inputdataconfig.json", input_data_config(spec)),
        ];
        if hosts.is_some() {
            files.push(("resourceconfig.json", resource_config(spec, host)));
        }
        for (name, value) in files {
            let path = dir.join(name);
            write_new(&path, &value, owner).map_err(|e| (path, e))?;
        }
    }
    for c in &spec.channels {
        // Emptied: the channel is downloaded afresh, whatever the last attempt did to it.
        let dir = channel_dir(layout, &c.name);
        empty_dir(layout, &dir, owner).map_err(|e| (dir, e))?;
    }
    Ok(())
}

/// Makes `dir` (in the job's directory) an empty real directory of `owner`: whatever is there
/// is removed (links removed, never followed) and the directory made again.
pub(crate) fn empty_dir(layout: &JobLayout, dir: &Path, owner: Option<u32>) -> io::Result<()> {
    let rel = dir.strip_prefix(&layout.job).map_err(|_| {
        io::Error::other(format!("'{}' is not in the job's directory", dir.display()))
    })?;
    match fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(dir)?,
        Ok(_) => fs::remove_file(dir)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    isolation::real_dirs(&layout.job, rel, true, owner)
}

/// Removes the previous attempt's config directories (whatever the job made of them: links
/// are removed, not followed), so no stale or planted file survives.
fn remove_config_dirs(layout: &JobLayout) -> io::Result<()> {
    let entries = match fs::read_dir(&layout.input) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name != "config" && !name.starts_with("config-algo-") {
            continue;
        }
        if entry.file_type()?.is_dir() {
            fs::remove_dir_all(entry.path())?;
        } else {
            fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// Creates `path` (in a config directory made afresh, so nothing is there) holding `value`,
/// exclusively: should anything be there after all, it is an error, never followed.
fn write_new(path: &Path, value: &Value, owner: Option<u32>) -> io::Result<()> {
    // One write: serde_json writes token by token, a syscall each on an unbuffered file.
    let mut text = serde_json::to_vec_pretty(value)?;
    text.push(b'\n');
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    f.write_all(&text)?;
    if let Some(uid) = owner {
        std::os::unix::fs::fchown(&f, Some(uid), Some(uid))?;
    }
    Ok(())
}

/// `SM_CHANNEL_<NAME>`: SageMaker upper-cases the name and keeps it otherwise; characters an
/// environment variable name cannot hold become `_`.
pub(crate) fn channel_var(name: &str) -> String {
    crate::environment::prefixed_var("SM_CHANNEL_", name)
}

/// The variables that describe the channels and config: `SM_CHANNELS`, `SM_CHANNEL_<NAME>`,
/// `SM_INPUT_DIR`, `SM_INPUT_CONFIG_DIR`, `SM_INPUT_DATA_CONFIG`.
pub(crate) fn variables(spec: &LaunchSpec, layout: &JobLayout) -> Vec<(String, String)> {
    let path = |p: &Path| p.to_string_lossy().into_owned();
    let names: Vec<&str> = spec.channels.iter().map(|c| c.name.as_str()).collect();
    let mut vars = vec![
        ("SM_CHANNELS".into(), json!(names).to_string()),
        ("SM_INPUT_DIR".into(), path(&layout.input)),
        ("SM_INPUT_CONFIG_DIR".into(), path(&layout.input_config)),
        (
            "SM_INPUT_DATA_CONFIG".into(),
            input_data_config(spec).to_string(),
        ),
    ];
    vars.extend(
        spec.channels
            .iter()
            .map(|c| (channel_var(&c.name), path(&channel_dir(layout, &c.name)))),
    );
    vars
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::InputChannel;
    use qm_core::AttemptId;
    use std::collections::BTreeMap;

    fn spec() -> LaunchSpec {
        let mut s = LaunchSpec::new(AttemptId(7), "job-1", "ml.g5.xlarge", vec!["true".into()]);
        s.count = 2;
        s.hyperparameters.insert("lr".into(), "0.1".into());
        s.channels.push(InputChannel {
            name: "train.v2".into(),
            uri: "s3://b/train".into(),
            data_type: "S3Prefix".into(),
            input_mode: "File".into(),
            distribution: "FullyReplicated".into(),
            content_type: Some("text/csv".into()),
            compression: None,
            record_wrapper: None,
        });
        s
    }

    #[test]
    fn config_files_use_sagemaker_s_member_names() {
        let s = spec();
        assert_eq!(
            input_data_config(&s),
            json!({"train.v2": {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated",
                                "RecordWrapperType": "None", "ContentType": "text/csv"}})
        );
        let r = resource_config(&s, 2);
        assert_eq!(r["current_host"], "algo-2");
        assert_eq!(r["hosts"], json!(["algo-1", "algo-2"]));
        assert_eq!(r["instance_groups"][0]["instance_type"], "ml.g5.xlarge");
        assert_eq!(channel_var("train.v2"), "SM_CHANNEL_TRAIN_V2");
    }

    #[test]
    fn prepare_writes_the_files_and_replaces_a_link_instead_of_following_it() {
        let dir = tempfile::tempdir().unwrap();
        let layout = JobLayout::new(dir.path(), "job-1", 1);
        layout.prepare(None).unwrap();
        let outside = dir.path().join("outside");
        fs::write(&outside, "keep").unwrap();
        let hp = layout.input_config.join("hyperparameters.json");
        fs::create_dir_all(&layout.input_config).unwrap();
        std::os::unix::fs::symlink(&outside, &hp).unwrap();
        // An earlier attempt's directory, which the link was planted in.
        prepare(&layout, &spec(), Some(2), JobDir::Earlier, None).unwrap();
        assert_eq!(fs::read_to_string(&outside).unwrap(), "keep");
        let written: Value = serde_json::from_str(&fs::read_to_string(&hp).unwrap()).unwrap();
        assert_eq!(written, json!({"lr": "0.1"}));
        let host2: Value = serde_json::from_str(
            &fs::read_to_string(config_dir(&layout, 2).join("resourceconfig.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(host2["current_host"], "algo-2");
        assert!(channel_dir(&layout, "train.v2").is_dir());
        // A directory planted where a file goes does not stop the next attempt, and a config
        // written without hosts leaves no stale resourceconfig.json.
        fs::create_dir(layout.input_config.join("x")).unwrap();
        fs::remove_file(&hp).unwrap();
        fs::create_dir(&hp).unwrap();
        prepare(&layout, &spec(), None, JobDir::Earlier, None).unwrap();
        assert!(hp.is_file());
        assert!(!layout.input_config.join("resourceconfig.json").exists());
        assert!(!config_dir(&layout, 2).exists());
        let vars: BTreeMap<String, String> = variables(&spec(), &layout).into_iter().collect();
        assert_eq!(vars["SM_CHANNELS"], r#"["train.v2"]"#);
        assert_eq!(
            vars["SM_CHANNEL_TRAIN_V2"],
            channel_dir(&layout, "train.v2").to_string_lossy()
        );
    }
}
