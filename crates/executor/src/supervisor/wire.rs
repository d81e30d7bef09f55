//! One end of a supervisor's connection: lines in, lines out, and no wakeup for nothing.
//!
//! Tokio's `UnixStream` registers a socket for writability as well as readability. With
//! edge-triggered epoll every read by the peer, which frees room in this side's send buffer,
//! then wakes this side's runtime, though nothing here waits to write: about five wakeups
//! per attempt on each side, each a switch between processes (and in a VM an interrupt
//! between CPUs), on the path of every start (`strace` of a drain of trivial jobs). A line
//! is a few hundred bytes and a Unix socket buffers hundreds of KiB, so here the socket is
//! registered for reading only: a send goes straight to the socket, and only one that finds
//! the buffer full (a peer that stopped reading, or a launch with a huge payload) waits for
//! room, through a registration made for that wait alone.

use std::io::{self, Read};
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use rustix::io::Errno;
use rustix::net::{RecvFlags, SendFlags};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use super::protocol::MAX_LINE;

/// How much is read from the socket at a time.
const READ_CHUNK: usize = 8192;

/// The sending half. One writer at a time per connection (two could interleave partial
/// writes): the executor's link writes its first lines, then leaves the writes to its
/// [`crate::executor::link::Outbox`] (which holds a clone) until the attempt has ended, and
/// closes it before it writes the acknowledgement itself.
#[derive(Debug, Clone)]
pub(crate) struct Sender {
    fd: Arc<AsyncFd<UnixStream>>,
}

/// The receiving half, with what was read past the last line returned.
#[derive(Debug)]
pub(crate) struct Receiver {
    fd: Arc<AsyncFd<UnixStream>>,
    buf: Vec<u8>,
    /// How much of `buf` is known to hold no newline.
    scanned: usize,
    eof: bool,
}

/// Both halves of `stream`, registered with the current runtime for reading only.
pub(crate) fn split(stream: UnixStream) -> io::Result<(Sender, Receiver)> {
    stream.set_nonblocking(true)?;
    let fd = Arc::new(register(stream, Interest::READABLE)?);
    let receiver = Receiver {
        fd: fd.clone(),
        buf: Vec::new(),
        scanned: 0,
        eof: false,
    };
    Ok((Sender { fd }, receiver))
}

/// Registers `stream` with the current runtime for `interest` alone.
// One of the workspace's five unsafe sites (the others: the zygote's fork, `reap`'s `wait4`, `cgroup::enter`,
// `cgroup::bpf`).
// Tokio's safe constructors register readability and writability both, which is what this
// module exists to avoid.
#[allow(unsafe_code)]
fn register(stream: UnixStream, interest: Interest) -> io::Result<AsyncFd<UnixStream>> {
    // SAFETY: the `AsyncFd` owns the stream, so its descriptor stays open and names the same
    // socket for the `AsyncFd`'s whole life, and `as_raw_fd` always returns that descriptor.
    unsafe { AsyncFd::register_with_interest(stream, interest) }.map_err(io::Error::from)
}

/// `msgs` as the connection carries them: one JSON line each.
pub(crate) fn lines<T: serde::Serialize>(msgs: &[T]) -> io::Result<Vec<u8>> {
    let mut lines = Vec::new();
    for msg in msgs {
        serde_json::to_writer(&mut lines, msg).map_err(io::Error::other)?;
        lines.push(b'\n');
    }
    Ok(lines)
}

impl Sender {
    /// Sends `msgs` as JSON lines, in one write (the peer reads them in one wakeup).
    pub(crate) async fn send_lines<T: serde::Serialize>(&self, msgs: &[T]) -> io::Result<()> {
        self.send(&lines(msgs)?).await
    }

    /// Writes as much of `bytes` as the socket's buffer takes now, without waiting, from any
    /// thread; how much that was.
    pub(crate) fn try_send(&self, bytes: &[u8]) -> io::Result<usize> {
        let mut sent = 0;
        while sent < bytes.len() {
            match rustix::net::send(self.fd.get_ref(), &bytes[sent..], SendFlags::NOSIGNAL) {
                Ok(n) => sent += n,
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => break,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(sent)
    }

    /// Writes all of `bytes`, waiting for room only when the socket's buffer is full.
    pub(crate) async fn send(&self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            match rustix::net::send(self.fd.get_ref(), bytes, SendFlags::NOSIGNAL) {
                Ok(n) => bytes = &bytes[n..],
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => self.room().await?,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Waits until the socket can take more. A duplicate of the descriptor is registered for
    /// writability for this wait only (epoll keeps one registration per descriptor, and the
    /// reading one must stay as it is); it reports at once if there is room already.
    async fn room(&self) -> io::Result<()> {
        let dup = self.fd.get_ref().try_clone()?;
        let writable = register(dup, Interest::WRITABLE)?;
        let _ready = writable.writable().await?;
        Ok(())
    }

    /// Shuts both directions down: the peer reads the end, and this side's receiver too.
    pub(crate) fn shutdown(&self) {
        let _ = self.fd.get_ref().shutdown(std::net::Shutdown::Both);
    }
}

impl Receiver {
    /// The next line, without its newline; `None` at the end of the stream (a last line
    /// without its newline is dropped: the peer died writing it). A line longer than any
    /// message ([`MAX_LINE`]) is an error: the peer is not what it should be. Cancel safe:
    /// what was read stays in the buffer.
    pub(crate) async fn recv(&mut self) -> io::Result<Option<Vec<u8>>> {
        loop {
            if let Some(line) = self.take_line() {
                return Ok(Some(line));
            }
            if self.buf.len() > MAX_LINE {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("a line longer than {MAX_LINE} bytes"),
                ));
            }
            if self.eof {
                return Ok(None);
            }
            self.read_more().await?;
        }
    }

    /// The first complete line in the buffer, taken out of it.
    fn take_line(&mut self) -> Option<Vec<u8>> {
        let at = self.buf[self.scanned..].iter().position(|&b| b == b'\n');
        let Some(at) = at else {
            self.scanned = self.buf.len();
            return None;
        };
        let end = self.scanned + at;
        let mut line: Vec<u8> = self.buf.drain(..=end).collect();
        line.pop();
        self.scanned = 0;
        Some(line)
    }

    /// Reads what the socket holds once it is readable; sets `eof` at its end.
    async fn read_more(&mut self) -> io::Result<()> {
        let mut chunk = [0u8; READ_CHUNK];
        loop {
            let mut ready = self.fd.readable().await?;
            match ready.try_io(|fd| fd.get_ref().read(&mut chunk)) {
                Ok(Ok(0)) => {
                    self.eof = true;
                    return Ok(());
                }
                Ok(Ok(n)) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(());
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => return Err(e),
                // Not readable after all: the readiness was cleared, wait again.
                Err(_would_block) => {}
            }
        }
    }

    /// Whether the peer said nothing yet and its end is still open: nothing buffered, and the
    /// socket holds no byte and no end of stream. Looks without consuming anything.
    pub(crate) fn idle(&self) -> bool {
        if !self.buf.is_empty() || self.eof {
            return false;
        }
        let mut byte = [0u8; 1];
        matches!(
            rustix::net::recv(
                self.fd.get_ref(),
                &mut byte,
                RecvFlags::PEEK | RecvFlags::DONTWAIT
            ),
            Err(Errno::AGAIN)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[tokio::test]
    async fn lines_cross_whole_split_or_many_at_once_and_the_end_is_seen() {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let (tx, mut rx) = split(ours).unwrap();
        assert!(rx.idle());
        theirs.write_all(b"one\ntw").unwrap();
        assert_eq!(rx.recv().await.unwrap().as_deref(), Some(&b"one"[..]));
        assert!(!rx.idle(), "half a line is waiting");
        theirs.write_all(b"o\nthree\n").unwrap();
        assert_eq!(rx.recv().await.unwrap().as_deref(), Some(&b"two"[..]));
        assert_eq!(rx.recv().await.unwrap().as_deref(), Some(&b"three"[..]));
        tx.send(b"back\n").await.unwrap();
        let mut got = [0u8; 5];
        theirs.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"back\n");
        theirs.write_all(b"cut sho").unwrap();
        drop(theirs);
        assert_eq!(rx.recv().await.unwrap(), None);
        assert!(!rx.idle());
    }

    #[tokio::test]
    async fn a_send_larger_than_the_socket_buffer_waits_for_room() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let (tx, _rx) = split(ours).unwrap();
        let big = vec![b'x'; 4 << 20];
        let reader = std::thread::spawn(move || {
            let mut all = Vec::new();
            (&theirs).take(4 << 20).read_to_end(&mut all).unwrap();
            all.len()
        });
        tx.send(&big).await.unwrap();
        assert_eq!(reader.join().unwrap(), 4 << 20);
    }

    #[tokio::test]
    async fn a_line_longer_than_any_message_is_refused() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let (_tx, mut rx) = split(ours).unwrap();
        let writer = std::thread::spawn(move || {
            let _ = (&theirs).write_all(&vec![b'x'; MAX_LINE + 2 * READ_CHUNK]);
        });
        let err = rx.recv().await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        drop(rx);
        drop(_tx);
        writer.join().unwrap();
    }
}
