//! Transports: smart HTTP(S), and a child process speaking upload-pack on
//! stdin/stdout (the `ssh` binary, or a local `git upload-pack` for `file://`).

pub(crate) mod http;
pub(crate) mod process;

use tokio::io::AsyncRead;

use crate::error::GitError;
use crate::pktline::PktReader;
use crate::protocol::Advertisement;

pub(crate) type BoxReader<'a> = PktReader<Box<dyn AsyncRead + Unpin + Send + 'a>>;

/// An open connection to an upload-pack service.
pub(crate) enum Conn {
    Http(http::HttpConn),
    Process(process::ProcConn),
}

impl Conn {
    /// Sends one request and returns a reader over the response.
    /// For HTTP every request is a new POST; for processes the request is
    /// written to the same stdin.
    pub(crate) async fn request(
        &mut self,
        adv: &Advertisement,
        body: Vec<u8>,
    ) -> Result<BoxReader<'_>, GitError> {
        match self {
            Conn::Http(h) => h.post(adv.version() == 2, body).await,
            Conn::Process(p) => p.send(&body).await,
        }
    }

    /// Turns an error met while reading a response into the most precise one
    /// available (for processes: what ssh/git printed on stderr).
    pub(crate) async fn explain(&mut self, err: GitError) -> GitError {
        match self {
            Conn::Http(_) => err,
            Conn::Process(p) => p.explain(err).await,
        }
    }

    /// Politely ends the conversation.
    pub(crate) async fn close(self) {
        if let Conn::Process(p) = self {
            p.close().await;
        }
    }
}
