//! Bounds on what a client can make the server hold or wait for: open connections, how long
//! a request's headers and body may take, how large its URI and headers may be, and how many
//! jobs may wait per share and per queue (docs/security.md lists them all with their
//! defaults).
//!
//! Connections are counted by the acceptor (a permit per connection, released when it
//! closes); the header timeout is hyper's (which also closes a keep-alive connection that
//! sits idle that long); everything else is the door, the outermost middleware, so that a
//! refusal comes back in the AWS error shape before anything is routed or verified.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::Response;
use qm_api::ApiError;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::respond::{error_response, MAX_BODY_BYTES};

/// Longest request target (path and query) accepted, in bytes.
pub const MAX_URI_BYTES: usize = 8 * 1024;
/// Most header bytes (names and values) of one request.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;
/// Most headers of one request.
pub const MAX_HEADERS: usize = 100;
/// Seconds a client refused for too many connections is told to wait.
const RETRY_AFTER_SECONDS: u32 = 1;

/// The resolved `[limits]` (defaults in [`Limits::DEFAULT`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    /// RUNNABLE jobs one quota share may hold; a submit beyond is refused.
    pub queued_per_share: u64,
    /// RUNNABLE jobs one job queue may hold.
    pub queued_per_queue: u64,
    /// Connections open at once; one more is answered 503 with `Retry-After` and closed.
    pub max_connections: usize,
    /// How long a request's headers may take to arrive, and how long a keep-alive connection
    /// may sit idle between requests.
    pub header_timeout: Duration,
    /// How long a request's body may take to arrive, from its headers.
    pub body_timeout: Duration,
    /// Bytes of stdout (and of stderr) one attempt's process may write before its log is
    /// rotated (local executor).
    pub log_bytes_per_attempt: u64,
}

impl Limits {
    /// What `qm serve` uses unless `[limits]` says otherwise. AWS Batch holds at most
    /// 1,000,000 jobs in SUBMITTED per queue; the rest are ours.
    pub const DEFAULT: Limits = Limits {
        queued_per_share: 100_000,
        queued_per_queue: 1_000_000,
        max_connections: 1024,
        header_timeout: Duration::from_secs(10),
        body_timeout: Duration::from_secs(30),
        log_bytes_per_attempt: 1 << 30,
    };
}

/// Counts connections: each holds a permit until it closes.
#[derive(Clone)]
pub struct Limited {
    permits: Arc<Semaphore>,
    max: usize,
    /// Whether refusals can be answered in HTTP (not under TLS, where the refusal comes
    /// before the handshake and the connection is only closed).
    plain: bool,
}

impl Limited {
    /// At most `max` connections; `plain`: refusals get a 503 answer.
    pub fn new(max: usize, plain: bool) -> Self {
        Limited {
            permits: Arc::new(Semaphore::new(max)),
            max,
            plain,
        }
    }
}

impl<S: Send + 'static> axum_server::accept::Accept<TcpStream, S> for Limited {
    type Stream = Held<TcpStream>;
    type Service = S;
    type Future = Pin<Box<dyn Future<Output = io::Result<(Held<TcpStream>, S)>> + Send>>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        let permit = self.permits.clone().try_acquire_owned();
        let (max, plain) = (self.max, self.plain);
        Box::pin(async move {
            match permit {
                Ok(permit) => {
                    let _ = stream.set_nodelay(true);
                    Ok((
                        Held {
                            stream,
                            _permit: permit,
                        },
                        service,
                    ))
                }
                Err(_) => {
                    if plain {
                        refuse_busy(stream, max).await;
                    }
                    Err(io::Error::other("too many connections"))
                }
            }
        })
    }
}

/// Answers 503 in the AWS shape and closes, reading what the client sent meanwhile so that
/// it sees the answer rather than a reset.
async fn refuse_busy(mut stream: TcpStream, max: usize) {
    let e = ApiError::Http(
        503,
        format!(
            "the server has {max} connections open, its limit ([limits] max_connections); retry after {RETRY_AFTER_SECONDS} s"
        ),
    );
    let body = serde_json::json!({"__type": e.error_type(), "message": e.message()}).to_string();
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nx-amzn-ErrorType: {}\r\nretry-after: {RETRY_AFTER_SECONDS}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        e.error_type(),
        body.len()
    );
    let deadline = Duration::from_millis(500);
    let _ = tokio::time::timeout(deadline, async {
        let mut sink = [0u8; 4096];
        let _ = stream.try_read(&mut sink);
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await?;
        while stream.read(&mut sink).await? > 0 {}
        io::Result::Ok(())
    })
    .await;
}

/// A connection and its permit.
pub struct Held<S> {
    stream: S,
    _permit: OwnedSemaphorePermit,
}

impl<S: AsyncRead + Unpin> AsyncRead for Held<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

/// Writes of a wrapper type go straight to its `stream` (the wrappers only watch reads or hold
/// a permit).
macro_rules! write_through {
    ($wrapper:ident) => {
        impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for $wrapper<S> {
            fn poll_write(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.stream).poll_write(cx, buf)
            }

            fn poll_flush(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.stream).poll_flush(cx)
            }

            fn poll_shutdown(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.stream).poll_shutdown(cx)
            }

            fn poll_write_vectored(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                self.stream.is_write_vectored()
            }
        }
    };
}
pub(crate) use write_through;

write_through!(Held);

/// hyper's side: the header timeout (with a timer, without which hyper keeps none) and room
/// for more headers than the door takes, so that the door answers in the AWS shape. It holds
/// once hyper knows the protocol; until then [`crate::watch`] keeps the time (and refuses
/// HTTP/2).
pub fn configure<E>(builder: &mut hyper_util::server::conn::auto::Builder<E>, limits: &Limits) {
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_headers(2 * MAX_HEADERS);
}

/// The door: the request target, the headers and the body (read here, within
/// `body_timeout`, at most [`MAX_BODY_BYTES`]), each refused in the AWS shape with the limit
/// that refused it.
pub async fn door(State(limits): State<Limits>, req: Request, next: Next) -> Response {
    match check(&limits, req).await {
        Ok(req) => next.run(req).await,
        Err(e) => error_response(&e),
    }
}

async fn check(limits: &Limits, req: Request) -> Result<Request, ApiError> {
    let target = req.uri().path_and_query().map_or(0, |pq| pq.as_str().len());
    if target > MAX_URI_BYTES {
        return Err(ApiError::Http(
            414,
            format!("the request target is {target} bytes long; at most {MAX_URI_BYTES} are accepted: send long parameters in the body"),
        ));
    }
    let headers = req.headers();
    let header_bytes: usize = headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len())
        .sum();
    if headers.len() > MAX_HEADERS || header_bytes > MAX_HEADER_BYTES {
        return Err(ApiError::Http(
            431,
            format!(
                "the request has {} headers of {header_bytes} bytes; at most {MAX_HEADERS} headers of {MAX_HEADER_BYTES} bytes in all are accepted",
                headers.len()
            ),
        ));
    }
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(req);
    }
    let too_large = || {
        ApiError::Http(
            413,
            format!(
                "the request body is larger than {} MiB, the largest accepted: send less per request",
                MAX_BODY_BYTES / (1024 * 1024)
            ),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(too_large());
    }
    let (parts, body) = req.into_parts();
    let read = axum::body::to_bytes(body, MAX_BODY_BYTES);
    let bytes = match tokio::time::timeout(limits.body_timeout, read).await {
        Err(_) => {
            return Err(ApiError::Http(
                408,
                format!(
                    "the request body did not arrive within {} s ([limits] body_timeout_seconds): send it in one go",
                    limits.body_timeout.as_secs_f64()
                ),
            ))
        }
        Ok(Err(e)) => {
            let over = e
                .into_inner()
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some();
            return Err(if over {
                too_large()
            } else {
                ApiError::client("the request body could not be read: the connection broke off")
            });
        }
        Ok(Ok(bytes)) => bytes,
    };
    Ok(Request::from_parts(parts, Body::from(bytes)))
}
