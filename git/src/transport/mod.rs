//! Transports: smart HTTP(S), and a child process speaking upload-pack on
//! stdin/stdout (the `ssh` binary, or a local `git upload-pack` for `file://`).

pub(crate) mod http;
pub(crate) mod process;
mod stream;

use crate::error::GitError;
use crate::pktline::BoxReader;
use crate::protocol::Advertisement;

/// An open connection to an upload-pack service.
pub(crate) enum Conn {
    Http(http::HttpConn),
    Process(process::ProcConn),
}

impl Conn {
    /// Sends one request and returns a reader over the response.
    /// For HTTP every request is a new POST, whose response body may not exceed
    /// `max_response` bytes; for processes the request is written to the same stdin (the
    /// reader's section limits bound what is read back).
    pub(crate) async fn request(
        &mut self,
        adv: &Advertisement,
        body: Vec<u8>,
        max_response: u64,
    ) -> Result<BoxReader<'_>, GitError> {
        match self {
            Conn::Http(h) => h.post(adv.version() == 2, body, max_response).await,
            Conn::Process(p) => p.send(&body).await,
        }
    }

    /// Turns an error met while reading a response into the most precise one
    /// available (for processes: what ssh/git printed on stderr).
    pub(crate) async fn explain(&mut self, err: GitError) -> GitError {
        match self {
            Conn::Http(h) => h.explain(err),
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
