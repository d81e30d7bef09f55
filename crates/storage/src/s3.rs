//! S3 through `object_store`: one client per bucket, built from the resolved [`Settings`].

use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path as ObjectPath;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig};

use crate::{Settings, StorageError};

/// Builds the client of `bucket`.
pub(crate) fn client(
    settings: &Settings,
    bucket: &str,
) -> Result<Arc<dyn ObjectStore>, StorageError> {
    // Start from the environment so that web identity, container and instance credentials
    // work as object_store finds them; what Settings resolved then overrides it. A role's
    // endpoint is all there is: nothing of the server's own identity may mix in.
    let start = match &settings.container {
        Some(c) => AmazonS3Builder::new()
            .with_config(AmazonS3ConfigKey::ContainerCredentialsFullUri, &c.url)
            .with_config(
                AmazonS3ConfigKey::ContainerAuthorizationTokenFile,
                c.token_file.to_string_lossy(),
            ),
        None => AmazonS3Builder::from_env(),
    };
    let mut b = start
        .with_bucket_name(bucket)
        .with_region(&settings.region)
        .with_retry(RetryConfig {
            backoff: BackoffConfig::default(),
            max_retries: 4,
            retry_timeout: settings.retry_timeout,
        })
        .with_client_options(
            ClientOptions::new()
                .with_connect_timeout(Duration::from_secs(5))
                .with_allow_http(
                    settings
                        .endpoint
                        .as_deref()
                        .is_some_and(|e| e.starts_with("http://")),
                ),
        );
    if let Some(endpoint) = &settings.endpoint {
        b = b
            .with_endpoint(endpoint)
            .with_virtual_hosted_style_request(false);
    }
    if let Some(keys) = settings
        .keys
        .as_ref()
        .filter(|_| settings.container.is_none())
    {
        b = b
            .with_access_key_id(&keys.access_key_id)
            .with_secret_access_key(&keys.secret_access_key);
        if let Some(token) = &keys.session_token {
            b = b.with_token(token);
        }
    }
    let store = b.build().map_err(|source| StorageError::Client {
        bucket: bucket.to_string(),
        source,
    })?;
    Ok(Arc::new(store))
}

/// The object path of key components.
pub(crate) fn path(key: &[String]) -> ObjectPath {
    ObjectPath::from_iter(key.iter().map(String::as_str))
}
