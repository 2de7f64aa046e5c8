//! A small, pure-Rust Git smart-protocol client for the source-controller.
//!
//! It does exactly what a GitOps source needs: list a remote's refs, fetch
//! one commit shallowly (depth 1) and walk its tree out of memory, without a
//! `git` binary and without a checkout on disk.
//!
//! # Protocols and transports
//!
//! * Protocol v2 (`ls-refs` with `peel`/`symrefs`/`ref-prefix`; `fetch` with
//!   `want`, `deepen 1`, `ofs-delta`, `no-progress`, `done`) when the server
//!   speaks it, protocol v0/v1 otherwise (ref advertisement, then
//!   `want … side-band-64k ofs-delta shallow`, `deepen 1`, `done`).
//! * Smart HTTP(S) via reqwest + rustls (ring): basic auth, bearer token,
//!   extra CA bundle, mTLS client certificate, proxy, timeout.
//! * SSH by spawning the system `ssh` binary (`-F /dev/null`, key and
//!   known_hosts in a private temp dir, `StrictHostKeyChecking=yes`,
//!   `IdentitiesOnly=yes`, `SetEnv=GIT_PROTOCOL=version=2`). Passphrase
//!   protected keys are unlocked by ssh itself through a tiny `SSH_ASKPASS`
//!   script (`SSH_ASKPASS_REQUIRE=force`) that prints the passphrase from an
//!   environment variable of the ssh process, so the passphrase is never
//!   written to disk. Set `RFLUX_GIT_SSH` to use another ssh binary.
//! * `file://` URLs spawn a local `git upload-pack` (for tests only; the
//!   controller does not need git). Only a `file://` superproject may have
//!   submodules on the local file system ([`Remote::for_submodule`]).
//!
//! # Limits
//!
//! A remote is not trusted. Besides the [`Remote`]'s timeout, everything it sends
//! is bounded by its [`Limits`]: the ref advertisement and every other section of
//! pkt-lines before the pack by bytes and lines, the pack by bytes and objects,
//! and decoding by the size of each object (delta results included, checked
//! before they are allocated) and by the sum of all decoded bytes. Going over a
//! bound is a [`GitError::Limit`].
//!
//! # API
//!
//! ```no_run
//! # async fn demo() -> Result<(), rflux_git::GitError> {
//! use rflux_git::{Remote, Auth, SparseFilter, WalkEntry};
//! let remote = Remote::new("https://example.com/org/repo.git")
//!     .with_auth(Auth::Bearer("token".into()));
//! let refs = rflux_git::ls_refs(&remote, &["refs/heads/main"]).await?;
//! let fetched = rflux_git::fetch_commit(&remote, &refs[0].oid).await?;
//! fetched.walk_tree::<rflux_git::GitError, _>(&SparseFilter::all(), |e| {
//!     if let WalkEntry::File { path, mode, data, .. } = e {
//!         println!("{mode:o} {path} {} bytes", data.len());
//!     }
//!     Ok(())
//! })?;
//! # Ok(()) }
//! ```
//!
//! [`Session`] keeps one connection for several requests (useful over SSH,
//! where each connection is a new ssh handshake).

mod error;
mod kind;
mod limits;
pub mod object;
mod oid;
pub mod pack;
pub mod pktline;
pub mod protocol;
mod remote;
pub mod submodule;
mod transport;
pub mod url;
mod walk;

use std::time::Duration;

pub use error::{GitError, Result};
pub use object::{Commit, ObjectKind, Signature, Tag};
pub use oid::ObjectId;
pub use pack::{Limits, ObjectStore};
pub use protocol::RemoteRef;
pub use remote::{Auth, ProtocolVersion, Remote, SshAuth, TlsConfig};
pub use submodule::{SubmoduleConfig, parse_gitmodules, resolve_submodule_url, submodule_for_path};
pub use walk::{SparseFilter, WalkEntry, walk_tree};

use protocol::Advertisement;
use transport::Conn;
use url::RemoteUrl;

async fn timed<T>(
    timeout: Duration,
    fut: impl std::future::Future<Output = Result<T, GitError>>,
) -> Result<T, GitError> {
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| GitError::Timeout(timeout))?
}

/// An open connection to a remote's upload-pack service.
pub struct Session {
    conn: Option<Conn>,
    adv: Advertisement,
    remote: Remote,
    /// v0 over a process can serve one fetch only.
    spent: bool,
}

impl Session {
    /// Connects and reads the server's advertisement.
    pub async fn connect(remote: &Remote) -> Result<Session, GitError> {
        timed(remote.timeout, Self::connect_inner(remote)).await
    }

    async fn connect_inner(remote: &Remote) -> Result<Session, GitError> {
        let (conn, adv) = match RemoteUrl::parse(&remote.url)? {
            RemoteUrl::Http { url } => {
                if matches!(remote.auth, Auth::Ssh(_)) {
                    return Err(GitError::Config(
                        "SSH credentials cannot be used with an HTTP(S) URL".into(),
                    ));
                }
                let (c, a) = transport::http::HttpConn::open(remote, &url).await?;
                (Conn::Http(c), a)
            }
            RemoteUrl::Ssh {
                user,
                host,
                port,
                path,
            } => {
                let Auth::Ssh(ssh) = &remote.auth else {
                    return Err(GitError::Config(
                        "an SSH URL needs SSH credentials (private key and known_hosts)".into(),
                    ));
                };
                let (c, a) = transport::process::ProcConn::open_ssh(
                    remote,
                    ssh,
                    user.as_deref(),
                    &host,
                    port,
                    &path,
                )
                .await?;
                (Conn::Process(c), a)
            }
            RemoteUrl::File { path } => {
                let (c, a) = transport::process::ProcConn::open_local(
                    &path,
                    remote.protocol == ProtocolVersion::V2,
                    &remote.limits,
                )
                .await?;
                (Conn::Process(c), a)
            }
        };
        adv.check_object_format()?;
        Ok(Session {
            conn: Some(conn),
            adv,
            remote: remote.clone(),
            spent: false,
        })
    }

    /// The protocol version the server speaks (2, or 0 for v0/v1).
    pub fn protocol_version(&self) -> u8 {
        self.adv.version()
    }

    /// The server's capabilities.
    pub fn capabilities(&self) -> &[String] {
        self.adv.caps()
    }

    fn conn(&mut self) -> Result<&mut Conn, GitError> {
        self.conn
            .as_mut()
            .ok_or_else(|| GitError::Transport("connection already closed".into()))
    }

    /// Refs whose names start with one of `prefixes` (all refs when empty),
    /// with peeled ids for annotated tags and symref targets.
    pub async fn ls_refs(&mut self, prefixes: &[&str]) -> Result<Vec<RemoteRef>, GitError> {
        let timeout = self.remote.timeout;
        timed(timeout, self.ls_refs_inner(prefixes)).await
    }

    async fn ls_refs_inner(&mut self, prefixes: &[&str]) -> Result<Vec<RemoteRef>, GitError> {
        if let Advertisement::V0 { refs, .. } = &self.adv {
            return Ok(protocol::filter_refs(refs, prefixes));
        }
        let req = protocol::ls_refs_request(&self.adv, prefixes)?;
        let adv = self.adv.clone();
        let max_response = self.remote.limits.max_advertisement_bytes;
        let conn = self.conn()?;
        let res = {
            let mut r = conn.request(&adv, req, max_response).await?;
            protocol::read_ls_refs(&mut r).await
        };
        match res {
            Ok(refs) => Ok(refs),
            Err(e) => Err(conn.explain(e).await),
        }
    }

    /// Fetches `want` (a commit, or an annotated tag pointing at one) with
    /// depth 1 and decodes the pack.
    pub async fn fetch_commit(&mut self, want: &ObjectId) -> Result<FetchedCommit, GitError> {
        let timeout = self.remote.timeout;
        timed(timeout, self.fetch_inner(want)).await
    }

    async fn fetch_inner(&mut self, want: &ObjectId) -> Result<FetchedCommit, GitError> {
        let is_process = matches!(self.conn, Some(Conn::Process(_)));
        let v2 = self.adv.version() == 2;
        if !v2 && is_process && self.spent {
            return Err(GitError::Transport(
                "a protocol v0 connection serves one fetch only; connect again".into(),
            ));
        }
        self.spent = true;
        let max_pack = self.remote.limits.max_pack_bytes;
        // The sections before the pack, and the side-band framing and progress around it,
        // may each take max_advertisement_bytes.
        let max_response =
            max_pack.saturating_add(self.remote.limits.max_advertisement_bytes.saturating_mul(2));
        let req = if v2 {
            protocol::fetch_request_v2(&self.adv, want)?
        } else {
            protocol::fetch_request_v0(&self.adv, want)?
        };
        let adv = self.adv.clone();
        let conn = self.conn()?;
        let res = {
            let mut r = conn.request(&adv, req, max_response).await?;
            if v2 {
                protocol::read_fetch_v2(&mut r, max_pack).await
            } else {
                protocol::read_fetch_v0(r, &adv, max_pack).await
            }
        };
        let resp = match res {
            Ok(r) => r,
            Err(e) => return Err(conn.explain(e).await),
        };
        let limits = self.remote.limits;
        let pack = resp.pack;
        let store = tokio::task::spawn_blocking(move || pack::parse_pack(&pack, &limits))
            .await
            .map_err(|e| GitError::Transport(format!("pack decoding task failed: {e}")))??;
        FetchedCommit::from_store(store, *want, resp.shallow)
    }

    /// Ends the session (for processes: closes stdin and reaps the child).
    pub async fn close(mut self) {
        if let Some(c) = self.conn.take() {
            c.close().await;
        }
    }
}

/// The result of a shallow fetch of one commit.
#[derive(Debug, Clone)]
pub struct FetchedCommit {
    /// The commit's id.
    pub id: ObjectId,
    pub commit: Commit,
    /// Annotated tags peeled to reach the commit (outermost first), when a tag was wanted.
    pub tags: Vec<(ObjectId, Tag)>,
    /// Commits the server marked shallow.
    pub shallow: Vec<ObjectId>,
    store: ObjectStore,
}

/// Deepest tag-of-tag chain followed.
const MAX_TAG_CHAIN: usize = 16;

impl FetchedCommit {
    /// Resolves `want` (commit or annotated tag chain) inside `store`.
    pub fn from_store(
        store: ObjectStore,
        want: ObjectId,
        shallow: Vec<ObjectId>,
    ) -> Result<FetchedCommit, GitError> {
        let mut tags = Vec::new();
        let mut cur = want;
        for _ in 0..=MAX_TAG_CHAIN {
            let (kind, data) = store.get(&cur).ok_or_else(|| {
                GitError::NotFound(format!("object {cur} is not in the fetched pack"))
            })?;
            match kind {
                ObjectKind::Tag => {
                    let tag = Tag::parse(data)?;
                    let next = tag.object;
                    tags.push((cur, tag));
                    cur = next;
                }
                ObjectKind::Commit => {
                    let commit = Commit::parse(data)?;
                    store.get_kind(&commit.tree, ObjectKind::Tree)?;
                    return Ok(FetchedCommit {
                        id: cur,
                        commit,
                        tags,
                        shallow,
                        store,
                    });
                }
                other => {
                    return Err(GitError::protocol(format!(
                        "{want} resolves to a {}, not a commit",
                        other.as_str()
                    )));
                }
            }
        }
        Err(GitError::protocol(format!(
            "tag chain from {want} is longer than {MAX_TAG_CHAIN}"
        )))
    }

    /// The objects received.
    pub fn store(&self) -> &ObjectStore {
        &self.store
    }

    /// The contents of the blob `name` at the top of the commit's tree (for example
    /// `.gitmodules`), or `None` when there is no such file.
    pub fn root_file(&self, name: &str) -> Result<Option<&[u8]>, GitError> {
        let root = self.store.get_kind(&self.commit.tree, ObjectKind::Tree)?;
        for entry in object::tree_entries(root) {
            let entry = entry?;
            if entry.name == name.as_bytes()
                && !entry.is_tree()
                && !entry.is_gitlink()
                && entry.mode != object::mode::SYMLINK
            {
                return self.store.get_kind(&entry.oid, ObjectKind::Blob).map(Some);
            }
        }
        Ok(None)
    }

    /// Walks the commit's tree (see [`walk_tree`]).
    pub fn walk_tree<E, F>(&self, filter: &SparseFilter, f: F) -> Result<(), E>
    where
        E: From<GitError>,
        F: FnMut(WalkEntry<'_>) -> Result<(), E>,
    {
        walk::walk_tree(&self.store, &self.commit.tree, filter, f)
    }
}

/// Lists the remote's refs (see [`Session::ls_refs`]).
pub async fn ls_refs(remote: &Remote, prefixes: &[&str]) -> Result<Vec<RemoteRef>, GitError> {
    let mut s = Session::connect(remote).await?;
    let r = s.ls_refs(prefixes).await;
    s.close().await;
    r
}

/// Fetches one commit with depth 1 (see [`Session::fetch_commit`]).
pub async fn fetch_commit(remote: &Remote, want: &ObjectId) -> Result<FetchedCommit, GitError> {
    let mut s = Session::connect(remote).await?;
    let r = s.fetch_commit(want).await;
    s.close().await;
    r
}
