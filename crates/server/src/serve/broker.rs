//! The broker of attempts' credentials (`credentials.rs`), and the data dir's key of their
//! tokens.

use crate::config::Config;
use crate::error::ServerError;
use crate::{credentials, secret, storage_settings};

/// The broker of attempts' credentials, where `[credentials]` asks for one (`credentials.rs`).
pub(super) fn role_broker(
    config: &Config,
    addr: std::net::SocketAddr,
) -> Result<Option<std::sync::Arc<credentials::Broker>>, ServerError> {
    let Some(wanted) = &config.credentials else {
        return Ok(None);
    };
    let refuse = |why: String| ServerError::Config(format!("credentials: {why}"));
    if config.slurm.is_some() {
        return Err(refuse("the Slurm executor's jobs run on other nodes, which cannot reach this server's loopback endpoint; remove [credentials] (its jobs use the nodes' own credentials)".into()));
    }
    if config.tls.is_some() {
        return Err(refuse("jobs fetch their credentials over plain HTTP on loopback, and this server speaks TLS only; remove [credentials] or [tls]".into()));
    }
    let secret = credentials_key(&config.data_dir)?;
    let settings = storage_settings(config);
    if matches!(wanted.source, credentials::Source::AssumeRole { .. }) && settings.keys.is_none() {
        return Err(refuse(format!(
            "source = \"assume_role\" signs STS AssumeRole with the server's own keys, and it has none ({}): give it a profile ([storage] profile) or AWS_ACCESS_KEY_ID",
            settings.keys_from
        )));
    }
    credentials::Broker::new(wanted.clone(), &secret, addr, &settings)
        .map(|b| Some(std::sync::Arc::new(b)))
        .map_err(refuse)
}

/// The data dir's key of attempts' credential tokens: made once (0600), so that tokens stay
/// valid across restarts and upgrades.
fn credentials_key(data_dir: &std::path::Path) -> Result<Vec<u8>, ServerError> {
    let path = data_dir.join("attempt-credentials.key");
    match std::fs::read(&path) {
        Ok(key) if key.len() == 32 => Ok(key),
        Ok(_) => Err(ServerError::Config(format!(
            "{} is not a 32-byte key: remove it, and a new one is made (running attempts' credential tokens change)",
            path.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // Written whole or not at all: a crash midway must not leave a short key.
            let key = secret::random_bytes(32);
            let tmp = path.with_extension("key.tmp");
            let written = std::fs::write(&tmp, &key)
                .and_then(|()| std::fs::File::open(&tmp)?.sync_all())
                .and_then(|()| std::fs::rename(&tmp, &path));
            written.map_err(|source| ServerError::Io {
                context: format!("writing {}", path.display()),
                source,
            })?;
            Ok(key)
        }
        Err(e) => Err(ServerError::Io {
            context: format!("reading {}", path.display()),
            source: e,
        }),
    }
}
