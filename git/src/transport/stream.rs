//! An HTTP response body as an [`AsyncRead`]: a task reads the body chunk by chunk and hands
//! the chunks over a small channel, so the pkt-line parser consumes the body while it
//! arrives and its section limits stop a hostile server before much is buffered.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::mpsc;

use crate::error::GitError;

/// Chunks read ahead of the parser.
const CHUNKS_IN_FLIGHT: usize = 8;

/// How much of a body is still read after the parser is done with it, so that a body that
/// is about to end leaves its connection reusable for the next request.
const DRAIN_LIMIT: usize = 64 << 10;

/// Where the reading task leaves the typed error behind the [`io::Error`] the reader
/// returns (the pkt-line layer only sees the latter).
#[derive(Clone, Default)]
pub(crate) struct ErrorSlot(Arc<Mutex<Option<GitError>>>);

impl ErrorSlot {
    fn put(&self, e: GitError) {
        // A poisoned lock only means another thread panicked mid-update: the slot is usable.
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
    }

    /// The error a reading task met, if any, leaving the slot empty.
    pub(crate) fn take(&self) -> Option<GitError> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// Reads the body of a response that the task started by [`stream`] receives. Dropping it
/// makes the task stop (after at most [`DRAIN_LIMIT`] more bytes).
pub(crate) struct BodyReader<T> {
    rx: mpsc::Receiver<io::Result<T>>,
    chunk: Option<T>,
    pos: usize,
}

impl<T: AsRef<[u8]> + Unpin> AsyncRead for BodyReader<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if let Some(chunk) = &this.chunk {
                let rest = chunk.as_ref().get(this.pos..).unwrap_or_default();
                if !rest.is_empty() {
                    let n = rest.len().min(buf.remaining());
                    buf.put_slice(&rest[..n]);
                    this.pos += n;
                    return Poll::Ready(Ok(()));
                }
                this.chunk = None;
                this.pos = 0;
            }
            match this.rx.poll_recv(cx) {
                Poll::Ready(Some(Ok(chunk))) => this.chunk = Some(chunk),
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e)),
                // End of the body.
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// Streams the body of `resp`. More than `max_bytes` bytes end it with the error
/// "`what` exceeds the limit of `max_bytes` bytes"; errors of the underlying connection are
/// mapped with `map_err`. Either is left in `slot` (emptied first) for [`ErrorSlot::take`].
pub(crate) fn stream(
    mut resp: reqwest::Response,
    max_bytes: u64,
    what: &'static str,
    map_err: impl Fn(reqwest::Error) -> GitError + Send + 'static,
    slot: ErrorSlot,
) -> BodyReader<impl AsRef<[u8]> + Send + Unpin + 'static> {
    slot.take();
    let (tx, rx) = mpsc::channel(CHUNKS_IN_FLIGHT);
    tokio::spawn(async move {
        let mut total = 0u64;
        loop {
            let item = match resp.chunk().await {
                Ok(None) => return,
                Ok(Some(chunk)) => {
                    total = total.saturating_add(chunk.len() as u64);
                    if total > max_bytes {
                        Err(GitError::Limit(format!(
                            "{what} exceeds the limit of {max_bytes} bytes"
                        )))
                    } else {
                        Ok(chunk)
                    }
                }
                Err(e) => Err(map_err(e)),
            };
            let failed = item.is_err();
            let item = item.map_err(|e| {
                let io = io::Error::other(e.to_string());
                slot.put(e);
                io
            });
            if tx.send(item).await.is_err() {
                // The parser is done (or gave up): finish a body that is about to end,
                // drop the connection otherwise.
                let mut left = DRAIN_LIMIT;
                while let Ok(Some(chunk)) = resp.chunk().await {
                    left = match left.checked_sub(chunk.len()) {
                        Some(l) => l,
                        None => return,
                    };
                }
                return;
            }
            if failed {
                return;
            }
        }
    });
    BodyReader {
        rx,
        chunk: None,
        pos: 0,
    }
}
