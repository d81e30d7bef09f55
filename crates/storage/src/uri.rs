//! Storage URIs: `s3://bucket/key` and `file:///absolute/path`, parsed once, with the key or
//! path split into plain components (a `..`, a `.` or an empty component is refused, never
//! resolved).

use std::fmt;
use std::path::PathBuf;

use crate::StorageError;

/// Where a URI points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// An S3 bucket and a key (or key prefix), without leading or trailing `/`.
    S3 {
        /// The bucket.
        bucket: String,
        /// The key's components.
        key: Vec<String>,
    },
    /// A local absolute path, as plain components.
    File(PathBuf),
}

/// A parsed URI, keeping its spelling for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageUri {
    /// As the payload spelled it.
    pub text: String,
    /// What it names.
    pub location: Location,
}

impl fmt::Display for StorageUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Whether a key or path component is safe as a file name of its own.
pub(crate) fn plain_component(part: &str) -> bool {
    !part.is_empty() && part != "." && part != ".." && !part.contains(['/', '\0'])
}

impl StorageUri {
    /// Parses `s3://bucket/key...` or `file:///path...`.
    pub fn parse(text: &str) -> Result<StorageUri, StorageError> {
        let bad = || StorageError::BadUri(text.to_string());
        let location = if let Some(rest) = text.strip_prefix("s3://") {
            let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty()
                || !bucket
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
            {
                return Err(bad());
            }
            Location::S3 {
                bucket: bucket.to_string(),
                key: components(text, key)?,
            }
        } else if let Some(path) = text.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(bad());
            }
            let parts = components(text, path)?;
            let mut buf = PathBuf::from("/");
            buf.extend(parts);
            Location::File(buf)
        } else {
            return Err(bad());
        };
        Ok(StorageUri {
            text: text.to_string(),
            location,
        })
    }

    /// This location with `parts` appended (`<S3OutputPath>/<job>/output/model.tar.gz`).
    pub fn join(&self, parts: &[&str]) -> Result<StorageUri, StorageError> {
        let mut text = self.text.trim_end_matches('/').to_string();
        for p in parts {
            text.push('/');
            text.push_str(p);
        }
        StorageUri::parse(&text)
    }
}

/// Splits `path` at `/`, dropping the empty components of leading, trailing and doubled
/// slashes; a `.` or `..` component is refused.
fn components(uri: &str, path: &str) -> Result<Vec<String>, StorageError> {
    let mut out = Vec::new();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        if !plain_component(part) {
            return Err(StorageError::UnsafePath {
                path: uri.to_string(),
                why: format!("the component '{part}' is not a plain name (no '.', '..' or NUL)"),
            });
        }
        out.push(part.to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3_and_file_uris_split_into_plain_components() {
        let u = StorageUri::parse("s3://my-bucket/data/train/").unwrap();
        assert_eq!(
            u.location,
            Location::S3 {
                bucket: "my-bucket".into(),
                key: vec!["data".into(), "train".into()]
            }
        );
        let u = StorageUri::parse("file:///srv/data//train").unwrap();
        assert_eq!(u.location, Location::File(PathBuf::from("/srv/data/train")));
        let bucket_only = StorageUri::parse("s3://b").unwrap();
        assert_eq!(
            bucket_only.location,
            Location::S3 {
                bucket: "b".into(),
                key: vec![]
            }
        );
    }

    #[test]
    fn dot_components_other_schemes_and_bad_buckets_are_refused() {
        for bad in [
            "s3://b/a/../etc",
            "s3://b/./x",
            "file:///srv/../etc/shadow",
            "file://relative/path",
            "http://b/x",
            "s3:///key",
            "s3://bu cket/x",
            "/plain/path",
        ] {
            assert!(StorageUri::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn join_appends_components_to_the_location() {
        let u = StorageUri::parse("s3://b/out/").unwrap();
        let j = u.join(&["job-1", "output", "model.tar.gz"]).unwrap();
        assert_eq!(j.text, "s3://b/out/job-1/output/model.tar.gz");
        assert!(u.join(&[".."]).is_err());
    }
}
