//! The HTTP (or HTTPS) server, the signals it answers (SIGINT and SIGTERM stop it, SIGHUP
//! reloads the config), and the TLS settings it serves with.

use crate::error::ServerError;
use crate::{http, limits, reload, watch};

use super::io;

/// The TLS settings of `[tls]` / `--tls-cert`, with ring as rustls's crypto.
pub(super) async fn load_tls(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<axum_server::tls_rustls::RustlsConfig, ServerError> {
    // Installed once per process; a second server in the same process finds it there.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let loaded = axum_server::tls_rustls::RustlsConfig::from_pem_file(cert, key)
        .await
        .map_err(|e| {
            ServerError::Config(format!(
                "tls: cannot use certificate {} with key {} ({e}); give PEM files: the chain, leaf first, and its private key",
                cert.display(),
                key.display()
            ))
        })?;
    // HTTP/1.1 only, where [limits] header_timeout_seconds holds (the SDKs and the CLI speak
    // it; clients that offer h2 settle on it).
    let mut settings = (*loaded.get_inner()).clone();
    settings.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(axum_server::tls_rustls::RustlsConfig::from_config(
        std::sync::Arc::new(settings),
    ))
}

/// Serves `app` on `listener` (over TLS where `tls` is given) until SIGINT or SIGTERM, then
/// lets the requests in flight finish (10 seconds at most).
pub(super) async fn serve_http(
    listener: tokio::net::TcpListener,
    tls: Option<axum_server::tls_rustls::RustlsConfig>,
    app: http::App,
    limits: limits::Limits,
) -> Result<(), ServerError> {
    let handle = axum_server::Handle::new();
    let stopping = handle.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        stopping.graceful_shutdown(Some(std::time::Duration::from_secs(10)));
    });
    let listener = listener
        .into_std()
        .map_err(io("handing over the listener".into()))?;
    let service = http::router(app).into_make_service();
    match tls {
        None => {
            let mut server = axum_server::from_tcp(listener)
                .acceptor(watch::Watch::new(
                    limits::Limited::new(limits.max_connections, true),
                    limits.header_timeout,
                ))
                .handle(handle);
            limits::configure(server.http_builder(), &limits);
            server
                .serve(service)
                .await
                .map_err(io("serving HTTP".into()))
        }
        Some(tls) => {
            // Watched inside TLS: the time runs from the end of the handshake (whose own
            // timeout is axum-server's), on what the client sends once decrypted.
            let acceptor = watch::Watch::new(
                axum_server::tls_rustls::RustlsAcceptor::new(tls)
                    .acceptor(limits::Limited::new(limits.max_connections, false)),
                limits.header_timeout,
            );
            let mut server = axum_server::from_tcp(listener)
                .acceptor(acceptor)
                .handle(handle);
            limits::configure(server.http_builder(), &limits);
            server
                .serve(service)
                .await
                .map_err(io("serving HTTPS".into()))
        }
    }
}

/// SIGHUP reloads the config file (`reload`), as `qm reload` does; it never ends the server
/// (its default action would). What it applied, or why it changed nothing, goes to the log.
pub(super) fn reload_on_hangup(reloader: std::sync::Arc<reload::Reloader>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        return;
    };
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            match reloader.reload("SIGHUP").await {
                Ok(r) if r.changed.is_empty() => {
                    eprintln!("qm: SIGHUP: reloaded the config; nothing changed")
                }
                Ok(r) => eprintln!(
                    "qm: SIGHUP: reloaded the config; applied {}",
                    r.changed.join(", ")
                ),
                Err(e) => eprintln!("qm: SIGHUP: reload refused: {}", e.message()),
            }
        }
    });
}

/// Resolves on SIGINT or SIGTERM (never, where SIGTERM cannot be listened to).
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
