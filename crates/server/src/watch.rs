//! The time a connection has before hyper knows its protocol. hyper's header timeout starts
//! only once it has told HTTP/1 from HTTP/2, which it does by reading until the first 24 bytes
//! match HTTP/2's preface or a byte does not; a client that sends nothing (or `P` and then
//! nothing) would be held for ever, one of `max_connections` each. [`Watch`] wraps the
//! stream hyper reads (under TLS, the decrypted one, from the end of the handshake) and gives
//! up the connection when the protocol is not known within `header_timeout_seconds`. A full
//! HTTP/2 preface closes the connection: HTTP/2 is not served (its streams have no header
//! timeout in hyper; the SDKs and the AWS CLI speak HTTP/1.1, and TLS offers only that).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, ReadBuf};
use tokio::time::Sleep;

/// What an HTTP/2 client sends first (RFC 9113 §3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// An acceptor that watches the streams of `inner` (see the module's doc).
#[derive(Clone)]
pub struct Watch<A> {
    inner: A,
    timeout: Duration,
}

impl<A> Watch<A> {
    /// Watches what `inner` accepts, giving each stream `timeout` to show its protocol.
    pub fn new(inner: A, timeout: Duration) -> Self {
        Watch { inner, timeout }
    }
}

impl<I, S, A> axum_server::accept::Accept<I, S> for Watch<A>
where
    A: axum_server::accept::Accept<I, S>,
    A::Future: Send + 'static,
    A::Stream: Send + 'static,
    A::Service: Send + 'static,
{
    type Stream = Watched<A::Stream>;
    type Service = A::Service;
    type Future = Pin<Box<dyn Future<Output = io::Result<(Self::Stream, Self::Service)>> + Send>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let accepted = self.inner.accept(stream, service);
        let timeout = self.timeout;
        Box::pin(async move {
            let (stream, service) = accepted.await?;
            Ok((Watched::new(stream, timeout), service))
        })
    }
}

/// A stream whose protocol is not known yet, then a plain pass-through.
pub struct Watched<S> {
    stream: S,
    /// While the protocol is unknown: when the connection is given up.
    deadline: Option<Pin<Box<Sleep>>>,
    /// How many bytes so far matched [`PREFACE`].
    matched: usize,
}

impl<S> Watched<S> {
    fn new(stream: S, timeout: Duration) -> Self {
        Watched {
            stream,
            deadline: Some(Box::pin(tokio::time::sleep(timeout))),
            matched: 0,
        }
    }

    /// Looks at bytes just read: a byte off the preface makes it HTTP/1 (hyper's header
    /// timeout runs from here); the whole preface is refused.
    fn saw(&mut self, bytes: &[u8]) -> io::Result<()> {
        let n = bytes.len().min(PREFACE.len() - self.matched);
        if bytes[..n] != PREFACE[self.matched..self.matched + n] {
            self.deadline = None;
            return Ok(());
        }
        self.matched += n;
        if self.matched == PREFACE.len() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "HTTP/2 is not served: speak HTTP/1.1",
            ));
        }
        Ok(())
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.stream).poll_read(cx, buf);
        if self.deadline.is_none() {
            return read;
        }
        if buf.filled().len() > before {
            let fresh = buf.filled()[before..].to_vec();
            if let Err(e) = self.saw(&fresh) {
                return Poll::Ready(Err(e));
            }
        } else if read.is_pending() {
            let expired = self
                .deadline
                .as_mut()
                .is_some_and(|d| d.as_mut().poll(cx).is_ready());
            if expired {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no request within [limits] header_timeout_seconds",
                )));
            }
        }
        read
    }
}

crate::limits::write_through!(Watched);

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn served(client_sends: &'static [u8], wait: Duration) -> io::Result<Vec<u8>> {
        let (mut client, server) = tokio::io::duplex(64);
        client.write_all(client_sends).await?;
        let mut watched = Watched::new(server, wait);
        let mut got = vec![0; 64];
        let n = tokio::time::timeout(Duration::from_secs(5), watched.read(&mut got))
            .await
            .expect("the watch decides within its timeout")?;
        got.truncate(n);
        drop(client);
        Ok(got)
    }

    #[tokio::test(start_paused = true)]
    async fn silence_times_out_and_an_http1_request_passes() {
        let e = served(b"", Duration::from_millis(100)).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(
            served(b"PUT / HTTP/1.1\r\n", Duration::from_millis(100))
                .await
                .unwrap(),
            b"PUT / HTTP/1.1\r\n"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_preface_times_out_on_the_next_read() {
        let (mut client, server) = tokio::io::duplex(64);
        client.write_all(b"PRI * HTTP/2").await.unwrap();
        let mut watched = Watched::new(server, Duration::from_millis(100));
        let mut got = [0u8; 64];
        assert_eq!(watched.read(&mut got).await.unwrap(), 12);
        let e = watched.read(&mut got).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        // An HTTP/1 request, however slow, is hyper's to time from its first byte off the
        // preface.
        let (mut client, server) = tokio::io::duplex(64);
        client.write_all(b"G").await.unwrap();
        let mut watched = Watched::new(server, Duration::from_millis(100));
        assert_eq!(watched.read(&mut got).await.unwrap(), 1);
        tokio::time::sleep(Duration::from_secs(1)).await;
        client.write_all(b"ET").await.unwrap();
        assert_eq!(watched.read(&mut got).await.unwrap(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn the_http2_preface_is_refused() {
        let e = served(PREFACE, Duration::from_secs(1)).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported);
    }
}
