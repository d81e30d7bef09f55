//! The input channels of a training payload (`InputDataConfig`) and where its output goes
//! (`OutputDataConfig`): read and checked at submit, because a channel's name becomes a
//! directory (`/opt/ml/input/data/<ChannelName>`) and an environment variable
//! (`SM_CHANNEL_<NAME>`), and because a mode the executor cannot serve must fail now, not when
//! the job finally starts.

use serde::Deserialize;

use crate::error::{shown, ApiError};
use crate::payload::{fail, FIELD};

/// SageMaker's bound on channels per training job.
pub const MAX_CHANNELS: usize = 20;

/// One input channel, as the executor provides it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Channel {
    /// `ChannelName`: `[A-Za-z0-9._-]`, 1 to 64 characters, neither `.` nor `..`.
    pub name: String,
    /// `DataSource.S3DataSource.S3Uri`: `s3://bucket/prefix` or, on one machine, `file:///path`.
    pub uri: String,
    /// `S3DataType`: `S3Prefix` (everything under the prefix) or `ManifestFile`.
    pub data_type: String,
    /// `S3DataDistributionType`: `FullyReplicated` or `ShardedByS3Key`.
    pub distribution: String,
    /// The channel's `InputMode`, else the job's `TrainingInputMode`: `File` or `FastFile`
    /// (served as `File`).
    pub input_mode: String,
    /// `ContentType`, passed on in `inputdataconfig.json`.
    pub content_type: Option<String>,
    /// `CompressionType`: `None` or `Gzip`, passed on.
    pub compression: Option<String>,
    /// `RecordWrapperType`: `None` or `RecordIO`, passed on.
    pub record_wrapper: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct RawChannel {
    channel_name: Option<String>,
    data_source: Option<DataSource>,
    content_type: Option<String>,
    compression_type: Option<String>,
    record_wrapper_type: Option<String>,
    input_mode: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DataSource {
    #[serde(rename = "S3DataSource")]
    s3_data_source: Option<S3DataSource>,
    file_system_data_source: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct S3DataSource {
    #[serde(rename = "S3Uri")]
    s3_uri: Option<String>,
    #[serde(rename = "S3DataType")]
    s3_data_type: Option<String>,
    #[serde(rename = "S3DataDistributionType")]
    s3_data_distribution_type: Option<String>,
}

/// `OutputDataConfig`.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct OutputDataConfig {
    s3_output_path: Option<String>,
}

/// Whether `uri` names a location the executor can read or write: `s3://bucket[/key]`, or a
/// `file://` path for single machines.
pub(crate) fn storage_uri(uri: &str) -> bool {
    let bucket = |rest: &str| !rest.is_empty() && !rest.starts_with('/');
    uri.len() <= 1024
        && !uri.contains('\0')
        && match (uri.strip_prefix("s3://"), uri.strip_prefix("file://")) {
            (Some(rest), _) => bucket(rest),
            (_, Some(path)) => path.starts_with('/'),
            _ => false,
        }
}

/// `AlgorithmSpecification.TrainingInputMode` (default `File`).
pub(crate) fn training_input_mode(mode: Option<String>) -> Result<String, ApiError> {
    let mode = mode.unwrap_or_else(|| "File".into());
    input_mode(
        &format!("{FIELD}.AlgorithmSpecification.TrainingInputMode"),
        &mode,
    )?;
    Ok(mode)
}

fn input_mode(at: &str, mode: &str) -> Result<(), ApiError> {
    match mode {
        "File" | "FastFile" => Ok(()),
        "Pipe" => fail(format!(
            "{at} is Pipe, which Quartermaster does not serve: channels are files under \
             /opt/ml/input/data/<ChannelName>; use File (FastFile is served as File)"
        )),
        other => fail(format!("{at} is {}: give File or FastFile", shown(other))),
    }
}

/// `InputDataConfig`, each channel checked and given its effective input mode.
pub(crate) fn channels(
    raw: Option<Vec<RawChannel>>,
    job_mode: &str,
) -> Result<Vec<Channel>, ApiError> {
    let raw = raw.unwrap_or_default();
    if raw.len() > MAX_CHANNELS {
        return fail(format!(
            "{FIELD}.InputDataConfig has {} channels: give at most {MAX_CHANNELS}",
            raw.len()
        ));
    }
    let mut out: Vec<Channel> = Vec::with_capacity(raw.len());
    for (i, c) in raw.into_iter().enumerate() {
        let channel = channel(&format!("{FIELD}.InputDataConfig[{i}]"), c, job_mode)?;
        if let Some(j) = out.iter().position(|o| o.name == channel.name) {
            return fail(format!(
                "{FIELD}.InputDataConfig[{i}].ChannelName {} is also InputDataConfig[{j}]'s: name each channel once",
                shown(&channel.name)
            ));
        }
        // Both would be SM_CHANNEL_<NAME>: the job would read one of them for the other.
        if let Some(j) = out
            .iter()
            .position(|o| variable_name(&o.name) == variable_name(&channel.name))
        {
            return fail(format!(
                "{FIELD}.InputDataConfig[{i}].ChannelName {} and InputDataConfig[{j}]'s {} are both SM_CHANNEL_{}: rename one",
                shown(&channel.name),
                shown(&out[j].name),
                variable_name(&channel.name)
            ));
        }
        out.push(channel);
    }
    Ok(out)
}

/// The channel's part of `SM_CHANNEL_<NAME>`: upper-cased, `.` and `-` made `_` (as the
/// executor names the variable, `qm_executor`'s `channel_var`, which cannot call this).
fn variable_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

fn channel(at: &str, c: RawChannel, job_mode: &str) -> Result<Channel, ApiError> {
    let name = channel_name(at, c.channel_name)?;
    let s3 = s3_source(at, c.data_source)?;
    let uri = s3.s3_uri.unwrap_or_default();
    if !storage_uri(&uri) {
        return fail(format!(
            "{at}.DataSource.S3DataSource.S3Uri {} must be s3://bucket/prefix or file:///absolute/path, at most 1024 characters",
            shown(&uri)
        ));
    }
    let data_type = one_of(
        &format!("{at}.DataSource.S3DataSource.S3DataType"),
        s3.s3_data_type,
        "S3Prefix",
        &["S3Prefix", "ManifestFile"],
        " (AugmentedManifestFile is Pipe mode's, which is not served)",
    )?;
    let distribution = one_of(
        &format!("{at}.DataSource.S3DataSource.S3DataDistributionType"),
        s3.s3_data_distribution_type,
        "FullyReplicated",
        &["FullyReplicated", "ShardedByS3Key"],
        "",
    )?;
    let input_mode_value = c.input_mode.unwrap_or_else(|| job_mode.to_string());
    input_mode(&format!("{at}.InputMode"), &input_mode_value)?;
    let compression = optional_one_of(
        &format!("{at}.CompressionType"),
        c.compression_type,
        &["None", "Gzip"],
    )?;
    let record_wrapper = optional_one_of(
        &format!("{at}.RecordWrapperType"),
        c.record_wrapper_type,
        &["None", "RecordIO"],
    )?;
    content_type(at, c.content_type.as_deref())?;
    Ok(Channel {
        name,
        uri,
        data_type,
        distribution,
        input_mode: input_mode_value,
        content_type: c.content_type,
        compression,
        record_wrapper,
    })
}

/// `ChannelName`: it names a directory and an environment variable.
fn channel_name(at: &str, name: Option<String>) -> Result<String, ApiError> {
    let name = name.unwrap_or_default();
    let name_ok = (1..=64).contains(&name.len())
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '.' | '-' | '_'));
    if !name_ok {
        return fail(format!(
            "{at}.ChannelName {} must be 1 to 64 letters, digits, '.', '-' or '_' (and not . or ..): it names the directory /opt/ml/input/data/<ChannelName>",
            shown(&name)
        ));
    }
    Ok(name)
}

/// `DataSource`: an `S3DataSource` is the one kind served.
fn s3_source(at: &str, source: Option<DataSource>) -> Result<S3DataSource, ApiError> {
    let source = source.unwrap_or(DataSource {
        s3_data_source: None,
        file_system_data_source: None,
    });
    if source.file_system_data_source.is_some() {
        return fail(format!(
            "{at}.DataSource.FileSystemDataSource (EFS, FSx) is not supported: give an S3DataSource with an s3:// or file:// S3Uri"
        ));
    }
    let Some(s3) = source.s3_data_source else {
        return fail(format!(
            "{at}.DataSource.S3DataSource is required: give its S3Uri (s3://bucket/prefix, or file:///path on one machine)"
        ));
    };
    Ok(s3)
}

/// `ContentType`, when given: at most 256 characters, without NUL.
fn content_type(at: &str, content_type: Option<&str>) -> Result<(), ApiError> {
    if let Some(t) = content_type {
        if t.len() > 256 || t.contains('\0') {
            return fail(format!(
                "{at}.ContentType must be at most 256 characters, without NUL"
            ));
        }
    }
    Ok(())
}

fn one_of(
    at: &str,
    value: Option<String>,
    default: &str,
    allowed: &[&str],
    note: &str,
) -> Result<String, ApiError> {
    let value = value.unwrap_or_else(|| default.to_string());
    if allowed.contains(&value.as_str()) {
        Ok(value)
    } else {
        fail(format!(
            "{at} is {}: give {}{note}",
            shown(&value),
            allowed.join(" or ")
        ))
    }
}

fn optional_one_of(
    at: &str,
    value: Option<String>,
    allowed: &[&str],
) -> Result<Option<String>, ApiError> {
    match value {
        None => Ok(None),
        Some(v) => one_of(at, Some(v), "", allowed, "").map(Some),
    }
}

/// `OutputDataConfig.S3OutputPath`, where `model.tar.gz` and `output.tar.gz` go.
pub(crate) fn output_path(config: Option<OutputDataConfig>) -> Result<Option<String>, ApiError> {
    let Some(path) = config.and_then(|c| c.s3_output_path) else {
        return Ok(None);
    };
    if !storage_uri(&path) {
        return fail(format!(
            "{FIELD}.OutputDataConfig.S3OutputPath {} must be s3://bucket/prefix or file:///absolute/path, at most 1024 characters",
            shown(&path)
        ));
    }
    Ok(Some(path))
}
