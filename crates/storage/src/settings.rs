//! Where S3 is and who the server is to it, resolved once at start-up as the AWS tools resolve
//! them: `[storage]` of the config first, then the process environment
//! (`AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_DEFAULT_REGION`,
//! `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_SESSION_TOKEN`), then the shared
//! credentials file's profile (`AWS_PROFILE`, else `default`), and last whatever
//! `object_store` finds on its own (web identity, the container or instance role).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// `[storage]` of the server's config file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StorageConfig {
    /// S3's endpoint, e.g. `http://127.0.0.1:9000` for MinIO or moto.
    pub endpoint: Option<String>,
    /// The region requests are signed for.
    pub region: Option<String>,
    /// The profile of the shared credentials file to use.
    pub profile: Option<String>,
    /// Local directories `file://` URIs may name; none: `file://` is refused.
    pub file_roots: Vec<PathBuf>,
    /// How long one S3 request is retried before the transfer fails.
    pub retry_timeout: Option<Duration>,
}

/// Static keys, from the environment or a profile.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Keys {
    /// `aws_access_key_id`.
    pub access_key_id: String,
    /// `aws_secret_access_key`.
    pub secret_access_key: String,
    /// `aws_session_token`, for temporary keys.
    pub session_token: Option<String>,
}

impl std::fmt::Debug for Keys {
    /// Never prints the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// What the S3 client is built from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Settings {
    /// `None`: AWS's regional endpoint.
    pub endpoint: Option<String>,
    /// The signing region.
    pub region: String,
    /// `None`: `object_store`'s own chain (web identity, container or instance role).
    pub keys: Option<Keys>,
    /// Where the keys came from, for the banner (never the keys).
    pub keys_from: String,
    /// Allowed `file://` roots, absolute.
    pub file_roots: Vec<PathBuf>,
    /// How long one request is retried.
    pub retry_timeout: Duration,
    /// A role's credentials served at an endpoint (an attempt's transfers with its job's
    /// role): used instead of `keys` and of the environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerCredentials>,
}

/// A container credentials endpoint, as the AWS SDKs read it from
/// `AWS_CONTAINER_CREDENTIALS_FULL_URI` and `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ContainerCredentials {
    /// The endpoint.
    pub url: String,
    /// The file that holds the `Authorization` header's value.
    pub token_file: PathBuf,
}

impl Settings {
    /// Resolves `cfg` against `env` (the process environment, as pairs) and the shared
    /// credentials file it points to.
    pub fn resolve(cfg: &StorageConfig, env: &BTreeMap<String, String>) -> Settings {
        let var = |k: &str| env.get(k).filter(|v| !v.is_empty()).cloned();
        let endpoint = cfg
            .endpoint
            .clone()
            .or_else(|| var("AWS_ENDPOINT_URL_S3"))
            .or_else(|| var("AWS_ENDPOINT_URL"));
        let region = cfg
            .region
            .clone()
            .or_else(|| var("AWS_REGION"))
            .or_else(|| var("AWS_DEFAULT_REGION"))
            .unwrap_or_else(|| "us-east-1".to_string());
        let from_env = match (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) {
            (Some(id), Some(secret)) if cfg.profile.is_none() => Some(Keys {
                access_key_id: id,
                secret_access_key: secret,
                session_token: var("AWS_SESSION_TOKEN"),
            }),
            _ => None,
        };
        let (keys, keys_from) = match from_env {
            Some(k) => (Some(k), "the environment (AWS_ACCESS_KEY_ID)".to_string()),
            None => {
                let profile = cfg
                    .profile
                    .clone()
                    .or_else(|| var("AWS_PROFILE"))
                    .unwrap_or_else(|| "default".to_string());
                let file = shared_credentials_file(var);
                match file.as_ref().and_then(|f| profile_keys(f, &profile)) {
                    Some(k) => (
                        Some(k),
                        format!(
                            "profile '{profile}' of {}",
                            file.as_ref()
                                .map_or(String::new(), |f| f.display().to_string())
                        ),
                    ),
                    None => (
                        None,
                        "the instance or container role (no keys in the environment or profile)"
                            .to_string(),
                    ),
                }
            }
        };
        Settings {
            endpoint,
            region,
            keys,
            keys_from,
            file_roots: cfg.file_roots.clone(),
            retry_timeout: cfg.retry_timeout.unwrap_or(Duration::from_secs(30)),
            container: None,
        }
    }

    /// One line for the server's banner.
    pub fn describe(&self) -> String {
        let roots = if self.file_roots.is_empty() {
            "file:// refused".to_string()
        } else {
            let r: Vec<String> = self
                .file_roots
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            format!("file:// under {}", r.join(", "))
        };
        format!(
            "s3 at {} ({}), keys from {}; {roots}",
            self.endpoint.as_deref().unwrap_or("AWS"),
            self.region,
            self.keys_from
        )
    }
}

/// Where the AWS tools look for the shared credentials file, by the variables `var` gives:
/// `AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials`.
pub fn shared_credentials_file(var: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    var("AWS_SHARED_CREDENTIALS_FILE")
        .map(PathBuf::from)
        .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".aws/credentials")))
}

/// The keys of `profile` in a shared credentials file, if it has both.
pub fn profile_keys(file: &std::path::Path, profile: &str) -> Option<Keys> {
    let ini = ini::Ini::load_from_file(file).ok()?;
    let section = ini.section(Some(profile))?;
    Some(Keys {
        access_key_id: section.get("aws_access_key_id")?.to_string(),
        secret_access_key: section.get("aws_secret_access_key")?.to_string(),
        session_token: section.get("aws_session_token").map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_config_wins_over_the_environment_and_s3_s_endpoint_over_the_general_one() {
        let e = env(&[
            ("AWS_ENDPOINT_URL", "http://general"),
            ("AWS_ENDPOINT_URL_S3", "http://s3-only"),
            ("AWS_DEFAULT_REGION", "eu-west-1"),
            ("AWS_ACCESS_KEY_ID", "AKID"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
        ]);
        let s = Settings::resolve(&StorageConfig::default(), &e);
        assert_eq!(s.endpoint.as_deref(), Some("http://s3-only"));
        assert_eq!(s.region, "eu-west-1");
        assert_eq!(s.keys.as_ref().unwrap().access_key_id, "AKID");
        let cfg = StorageConfig {
            endpoint: Some("http://configured".into()),
            region: Some("us-west-2".into()),
            ..Default::default()
        };
        let s = Settings::resolve(&cfg, &e);
        assert_eq!(s.endpoint.as_deref(), Some("http://configured"));
        assert_eq!(s.region, "us-west-2");
        assert!(
            !format!("{s:?}").contains("secret"),
            "Debug never shows the secret"
        );
    }

    #[test]
    fn without_keys_in_the_environment_the_profile_of_the_shared_file_is_used() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("credentials");
        std::fs::write(
            &file,
            "[default]\naws_access_key_id = D\naws_secret_access_key = d\n[team]\naws_access_key_id = T\naws_secret_access_key = t\n",
        )
        .unwrap();
        let f = file.to_str().unwrap();
        let s = Settings::resolve(
            &StorageConfig::default(),
            &env(&[("AWS_SHARED_CREDENTIALS_FILE", f)]),
        );
        assert_eq!(s.keys.unwrap().access_key_id, "D");
        let s = Settings::resolve(
            &StorageConfig::default(),
            &env(&[("AWS_SHARED_CREDENTIALS_FILE", f), ("AWS_PROFILE", "team")]),
        );
        assert_eq!(s.keys.unwrap().access_key_id, "T");
        let s = Settings::resolve(
            &StorageConfig::default(),
            &env(&[
                ("AWS_SHARED_CREDENTIALS_FILE", f),
                ("AWS_PROFILE", "nobody"),
            ]),
        );
        assert!(s.keys.is_none() && s.keys_from.contains("role"));
        assert_eq!(s.region, "us-east-1");
    }
}
