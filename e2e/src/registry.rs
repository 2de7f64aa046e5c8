//! A real OCI registry for tests: distribution's `registry` v3.1.2 (built by
//! `e2e/registry/build.sh`) on a free loopback port, one process per test, in every auth/TLS
//! mode the OCIRepository tests need ([`RegistryMode`]), stopped when dropped.
//!
//! - [`Registry::start`] writes the registry's config (filesystem storage in its own temporary
//!   directory, deletes enabled, a fixed `http.secret`, traces off), starts it and waits until
//!   `GET /v2/` answers (200, or 401 with auth).
//! - [`RegistryClient`] (`client.rs`) is a minimal raw client: it pushes what the `flux` CLI
//!   would never write (arbitrary blobs, arbitrary manifests or indexes, descriptors whose size
//!   lies) and reads manifests and blobs back. It follows Basic and Bearer challenges.
//! - [`push`] drives the real `flux push artifact` / `flux tag artifact` against a registry.
//! - Bearer mode runs an in-process [`TokenServer`] (`token.rs`) as the realm of
//!   distribution's `silly` auth and records every token request. The realm is
//!   `http://localhost:<port>/token`, not `127.0.0.1`: go-containerregistry v0.21.6 (the `flux`
//!   CLI, Flux's source-controller) refuses a realm whose host is a loopback/private IP literal
//!   unless its host:port is the registry's own ("realm host "127.0.0.1" is a private or
//!   link-local address"); a host name passes. [`RegistryOptions::realm_host`] changes it, e.g.
//!   to test that refusal.
//!
//! What the registry itself refuses, so hostile tests know their limits: a manifest must parse
//! as its `Content-Type` (OCI/Docker manifest or index, at most 4 MiB), and every blob an image
//! manifest references (config, layers) must exist in the repository. Descriptor sizes, media
//! types, annotations and the blob bytes are never checked; the children of an index are not
//! checked either, unless [`RegistryOptions::validate_index_children`] asks for it.
//!
//! ```no_run
//! # fn demo() -> anyhow::Result<()> {
//! use rflux_e2e::registry::{Registry, RegistryMode, push};
//! if let Some(why) = rflux_e2e::registry::skip_reason() { eprintln!("skipped: {why}"); return Ok(()); }
//! let reg = Registry::start(RegistryMode::Http)?;
//! let digest = push::push_artifact(&reg, "apps/podinfo", "6.1.0", std::path::Path::new("deploy"),
//!     "https://git.example/podinfo.git", "main@sha1:0123456789abcdef0123456789abcdef01234567")?;
//! push::tag_artifact(&reg, "apps/podinfo", "6.1.0", "latest")?;
//! println!("{} -> {digest}", reg.url("apps/podinfo"));
//! # Ok(()) }
//! ```

mod bin;
mod client;
mod config;
mod error;
pub mod push;
mod tls;
mod token;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

pub use bin::{REGISTRY_VERSION, registry_bin_dir, registry_binary, skip_reason};
pub use client::{
    ClientOptions, Descriptor, FetchedManifest, MAX_MANIFEST, Ping, RegistryClient, image_index,
    image_manifest, media_types, sha256_digest,
};
pub use config::BEARER_SERVICE;
pub use error::RegistryError;
pub use token::{TokenRequest, TokenServer};

use error::Result;
use tls::{Tls, make_pki};

/// Knobs of [`Registry::start_with`]; [`Default`] is what [`Registry::start`] uses.
#[derive(Clone, Debug)]
pub struct RegistryOptions {
    /// Host of the Bearer realm URL (default `localhost`; the token server listens on
    /// 127.0.0.1 only).
    pub realm_host: String,
    /// Check that the children of a pushed image index exist (distribution's default). Off by
    /// default here, so hostile tests can push an index whose children are missing.
    pub validate_index_children: bool,
}

impl Default for RegistryOptions {
    fn default() -> Self {
        RegistryOptions {
            realm_host: "localhost".into(),
            validate_index_children: false,
        }
    }
}

/// How long [`Registry::start`] waits for `GET /v2/` to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Auth and transport of one registry instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegistryMode {
    /// Plain HTTP, anonymous read and write.
    Http,
    /// HTTPS with a server certificate from a test CA ([`Registry::ca_pem`]), anonymous.
    Https,
    /// HTTPS that requires a client certificate signed by the test CA
    /// ([`Registry::client_cert_pem`], [`Registry::client_key_pem`]).
    Mtls,
    /// Plain HTTP with htpasswd Basic auth (bcrypt).
    Htpasswd { user: String, password: String },
    /// Plain HTTP with a Bearer challenge (`auth: silly`) whose realm is an in-process
    /// [`TokenServer`] that issues tokens only for these Basic credentials. Note: `silly` itself
    /// accepts any `Authorization` header; the token server is where credentials are checked.
    Bearer { user: String, password: String },
}

impl RegistryMode {
    /// Whether the registry speaks TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self, RegistryMode::Https | RegistryMode::Mtls)
    }

    /// The credentials clients need, if any.
    pub fn credentials(&self) -> Option<(&str, &str)> {
        match self {
            RegistryMode::Htpasswd { user, password } | RegistryMode::Bearer { user, password } => {
                Some((user.as_str(), password.as_str()))
            }
            _ => None,
        }
    }

    /// The status an anonymous `GET /v2/` gets (with the client certificate for mTLS).
    pub fn anonymous_ping_status(&self) -> u16 {
        if self.credentials().is_some() {
            401
        } else {
            200
        }
    }

    fn name(&self) -> &'static str {
        match self {
            RegistryMode::Http => "http",
            RegistryMode::Https => "https",
            RegistryMode::Mtls => "mtls",
            RegistryMode::Htpasswd { .. } => "htpasswd",
            RegistryMode::Bearer { .. } => "bearer",
        }
    }
}

/// A running registry; dropping it stops the process (and its token server, and its twin).
/// The temporary directory (config, PKI, storage) goes when the last instance over it is gone.
pub struct Registry {
    mode: RegistryMode,
    /// Shared with a twin ([`Registry::twin`]): removed when both are dropped.
    tmp: Arc<tempfile::TempDir>,
    /// This instance's own files (config, log).
    dir: PathBuf,
    data_dir: PathBuf,
    port: u16,
    child: Option<Child>,
    log: PathBuf,
    tls: Option<Tls>,
    token: Option<TokenServer>,
    /// The realm URL the Bearer challenge names.
    realm: Option<String>,
    /// [`RegistryOptions::validate_index_children`], for the twin.
    validate_index_children: bool,
    /// The HTTPS instance without client authentication over the same storage (mTLS pushes).
    push_twin: OnceLock<Box<Registry>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("mode", &self.mode.name())
            .field("host", &self.host())
            .field("dir", &self.dir)
            .finish()
    }
}

impl Registry {
    /// Starts a registry in `mode` on a free loopback port, in a fresh temporary directory,
    /// and waits until it answers `GET /v2/`. Blocking (TLS material comes from `openssl`).
    pub fn start(mode: RegistryMode) -> Result<Registry> {
        Self::start_with(mode, &RegistryOptions::default())
    }

    /// [`Registry::start`] with options.
    pub fn start_with(mode: RegistryMode, opts: &RegistryOptions) -> Result<Registry> {
        let binary = registry_binary()?;
        let tmp = tempfile::Builder::new()
            .prefix(&format!("rflux-registry-{}-", mode.name()))
            .tempdir()
            .map_err(|e| RegistryError::io("creating the registry's directory", e))?;
        let tmp = Arc::new(tmp);
        let tls = if mode.is_tls() {
            Some(make_pki(tmp.path())?)
        } else {
            None
        };
        let token = match &mode {
            RegistryMode::Bearer { user, password } => Some(TokenServer::start(user, password)?),
            _ => None,
        };
        let data_dir = tmp.path().join("data");
        std::fs::create_dir_all(&data_dir)
            .map_err(|e| RegistryError::io(format!("creating {}", data_dir.display()), e))?;
        let htpasswd = match &mode {
            RegistryMode::Htpasswd { user, password } => {
                let path = tmp.path().join("htpasswd");
                let line = config::htpasswd_line(user, password)?;
                std::fs::write(&path, line)
                    .map_err(|e| RegistryError::io(format!("writing {}", path.display()), e))?;
                Some(path)
            }
            _ => None,
        };
        let settings = config::Settings {
            data_dir: data_dir.clone(),
            tls: tls.as_ref().map(|t| config::TlsFiles {
                cert: t.server_cert.clone(),
                key: t.server_key.clone(),
                client_ca: (mode == RegistryMode::Mtls).then(|| t.ca_cert.clone()),
            }),
            htpasswd,
            token_realm: token.as_ref().map(|t| t.url_with_host(&opts.realm_host)),
            validate_index_children: opts.validate_index_children,
        };
        Self::launch(&binary, mode, tmp, "main", settings, tls, token)
    }

    /// Writes the config of instance `name` and starts it; retries on another port when the
    /// one picked was taken meanwhile.
    fn launch(
        binary: &Path,
        mode: RegistryMode,
        tmp: Arc<tempfile::TempDir>,
        name: &str,
        settings: config::Settings,
        tls: Option<Tls>,
        token: Option<TokenServer>,
    ) -> Result<Registry> {
        let dir = tmp.path().join(name);
        std::fs::create_dir_all(&dir)
            .map_err(|e| RegistryError::io(format!("creating {}", dir.display()), e))?;
        let mut reg = Registry {
            mode,
            data_dir: settings.data_dir.clone(),
            tmp,
            log: dir.join("registry.log"),
            dir,
            port: 0,
            child: None,
            realm: settings.token_realm.clone(),
            validate_index_children: settings.validate_index_children,
            tls,
            token,
            push_twin: OnceLock::new(),
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            reg.port = crate::free_port().map_err(|e| RegistryError::Protocol {
                what: "picking a port".into(),
                message: format!("{e:#}"),
            })?;
            let config_path = reg.dir.join("config.yml");
            let yaml = config::render(&settings, reg.port);
            std::fs::write(&config_path, yaml)
                .map_err(|e| RegistryError::io(format!("writing {}", config_path.display()), e))?;
            reg.spawn(binary, &config_path)?;
            match reg.wait_ready() {
                Ok(()) => return Ok(reg),
                Err(e) => {
                    reg.stop();
                    let taken = matches!(&e, RegistryError::Exited { log, .. }
                        if log.contains("address already in use"));
                    if !taken || attempt >= 3 {
                        return Err(e);
                    }
                }
            }
        }
    }

    fn spawn(&mut self, binary: &Path, config_path: &Path) -> Result<()> {
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| RegistryError::io(format!("opening {}", self.log.display()), e))?;
        let err = log
            .try_clone()
            .map_err(|e| RegistryError::io("cloning the log handle", e))?;
        // Left in the test's process group, so a Ctrl-C on `cargo test` stops it too.
        let mut cmd = Command::new(binary);
        cmd.arg("serve")
            .arg(config_path)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .env("OTEL_TRACES_EXPORTER", "none")
            .env("OTEL_METRICS_EXPORTER", "none")
            .env("OTEL_LOGS_EXPORTER", "none");
        // Any REGISTRY_* variable of ours would override the config file.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("REGISTRY_") {
                cmd.env_remove(key);
            }
        }
        let child = cmd
            .spawn()
            .map_err(|e| RegistryError::io(format!("starting {}", binary.display()), e))?;
        self.child = Some(child);
        Ok(())
    }

    fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        // A fresh client per probe: each probe runs on its own short-lived runtime.
        let base = self.base_url();
        let ca = self.ca_pem().map(String::from);
        let identity = self
            .tls
            .as_ref()
            .map(|t| format!("{}{}", t.client_cert_pem, t.client_key_pem));
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(RegistryError::Exited {
                    status: status.to_string(),
                    log: self.log_tail(30),
                });
            }
            let (base, ca, identity) = (base.clone(), ca.clone(), identity.clone());
            let probe = client::block_on(async move {
                RegistryClient::new(&base, ca.as_deref(), identity.as_deref(), None)?
                    .ping()
                    .await
            });
            let last = match probe.map(|p| p.status) {
                Ok(200 | 401) => return Ok(()),
                Ok(status) => format!("HTTP {status}"),
                Err(e) => format!("{e}: {}", error_chain(&e)),
            };
            if Instant::now() >= deadline {
                return Err(RegistryError::NotReady {
                    timeout: READY_TIMEOUT,
                    last,
                    log: self.log_tail(30),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts a second registry over the same storage directory. For [`RegistryMode::Mtls`]
    /// it is an HTTPS instance without client authentication (same CA and server certificate):
    /// the `flux` CLI has no client-certificate option, so pushes for an mTLS registry go
    /// through it. For the other modes it has the same mode (and shares the token server's
    /// realm in Bearer mode). Content pushed to either is visible through both.
    pub fn twin(&self) -> Result<Registry> {
        let binary = registry_binary()?;
        let mode = match &self.mode {
            RegistryMode::Mtls => RegistryMode::Https,
            other => other.clone(),
        };
        let settings = config::Settings {
            data_dir: self.data_dir.clone(),
            tls: self.tls.as_ref().map(|t| config::TlsFiles {
                cert: t.server_cert.clone(),
                key: t.server_key.clone(),
                client_ca: (mode == RegistryMode::Mtls).then(|| t.ca_cert.clone()),
            }),
            htpasswd: matches!(mode, RegistryMode::Htpasswd { .. })
                .then(|| self.tmp.path().join("htpasswd")),
            token_realm: self.realm.clone(),
            validate_index_children: self.validate_index_children,
        };
        let name = format!("twin-{}", crate::random_suffix(6));
        Self::launch(
            &binary,
            mode,
            self.tmp.clone(),
            &name,
            settings,
            self.tls.clone(),
            None,
        )
    }

    /// Where the `flux` CLI pushes for this registry: itself, or for mTLS its twin (started
    /// once, kept until this registry is dropped).
    pub fn push_endpoint(&self) -> Result<&Registry> {
        if self.mode != RegistryMode::Mtls {
            return Ok(self);
        }
        if let Some(twin) = self.push_twin.get() {
            return Ok(twin);
        }
        let twin = Box::new(self.twin()?);
        // A concurrent caller may have won; either twin serves the same storage.
        Ok(self.push_twin.get_or_init(|| twin))
    }

    /// The mode it was started in.
    pub fn mode(&self) -> &RegistryMode {
        &self.mode
    }

    /// `127.0.0.1:<port>`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `oci://127.0.0.1:<port>/<repo>` (what `OCIRepository.spec.url` takes).
    pub fn url(&self, repo: &str) -> String {
        format!("oci://{}/{}", self.host(), repo.trim_matches('/'))
    }

    /// `http://127.0.0.1:<port>` or `https://…`.
    pub fn base_url(&self) -> String {
        let scheme = if self.mode.is_tls() { "https" } else { "http" };
        format!("{scheme}://{}", self.host())
    }

    /// The credentials of an htpasswd or Bearer registry.
    pub fn credentials(&self) -> Option<(&str, &str)> {
        self.mode.credentials()
    }

    /// PEM of the CA that signed the server (and the mTLS client) certificate (TLS modes).
    pub fn ca_pem(&self) -> Option<&str> {
        self.tls.as_ref().map(|t| t.ca_pem.as_str())
    }

    /// Path of [`Self::ca_pem`] (for `SSL_CERT_FILE`).
    pub fn ca_path(&self) -> Option<&Path> {
        self.tls.as_ref().map(|t| t.ca_cert.as_path())
    }

    /// A client certificate the registry accepts in mTLS mode (issued in both TLS modes).
    pub fn client_cert_pem(&self) -> Option<&str> {
        self.tls.as_ref().map(|t| t.client_cert_pem.as_str())
    }

    /// The private key of [`Self::client_cert_pem`] (PKCS#8 PEM).
    pub fn client_key_pem(&self) -> Option<&str> {
        self.tls.as_ref().map(|t| t.client_key_pem.as_str())
    }

    /// Paths of the client certificate and key (TLS modes).
    pub fn client_cert_paths(&self) -> Option<(&Path, &Path)> {
        self.tls
            .as_ref()
            .map(|t| (t.client_cert.as_path(), t.client_key.as_path()))
    }

    /// The storage root (`storage.filesystem.rootdirectory`), shared with twins.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// This instance's directory (config and log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The registry's log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        crate::process::log_tail(&self.log, lines)
    }

    /// The token server of a Bearer registry.
    pub fn token_server(&self) -> Option<&TokenServer> {
        self.token.as_ref()
    }

    /// The realm URL of the Bearer challenge.
    pub fn token_realm(&self) -> Option<&str> {
        self.realm.as_deref()
    }

    /// The token requests seen so far (empty unless Bearer).
    pub fn token_requests(&self) -> Vec<TokenRequest> {
        self.token
            .as_ref()
            .map(TokenServer::requests)
            .unwrap_or_default()
    }

    /// A raw client with everything the mode needs (CA, client certificate, credentials).
    pub fn client(&self) -> Result<RegistryClient> {
        self.client_with(&ClientOptions {
            credentials: self
                .credentials()
                .map(|(u, p)| (u.to_string(), p.to_string())),
            client_cert: true,
            trust_ca: true,
        })
    }

    /// A raw client trusting the CA but without credentials or client certificate.
    pub fn anonymous_client(&self) -> Result<RegistryClient> {
        self.client_with(&ClientOptions {
            credentials: None,
            client_cert: false,
            trust_ca: true,
        })
    }

    /// A raw client with the given parts.
    pub fn client_with(&self, opts: &ClientOptions) -> Result<RegistryClient> {
        let ca = opts.trust_ca.then(|| self.ca_pem()).flatten();
        let identity = match (&self.tls, opts.client_cert) {
            (Some(t), true) => Some(format!("{}{}", t.client_cert_pem, t.client_key_pem)),
            _ => None,
        };
        RegistryClient::new(
            &self.base_url(),
            ca,
            identity.as_deref(),
            opts.credentials.clone(),
        )
    }

    /// Pushes `bytes` as a blob of `repo` with the full-access client; returns its digest.
    pub async fn push_raw_blob(
        &self,
        repo: &str,
        bytes: impl Into<bytes::Bytes>,
    ) -> Result<String> {
        self.client()?.push_raw_blob(repo, bytes.into()).await
    }

    /// Puts `bytes` as manifest `reference` (tag or digest) of `repo` with `Content-Type:
    /// media_type`; returns the digest the registry stored it under.
    pub async fn push_raw_manifest(
        &self,
        repo: &str,
        reference: &str,
        media_type: &str,
        bytes: impl Into<bytes::Bytes>,
    ) -> Result<String> {
        self.client()?
            .push_raw_manifest(repo, reference, media_type, bytes.into())
            .await
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Stops the process (SIGTERM, SIGKILL after 5 s) and its twin; the files stay until the
    /// value is dropped. The token server keeps running until then.
    pub fn stop(&mut self) {
        if let Some(mut twin) = self.push_twin.take() {
            twin.stop();
        }
        let Some(mut child) = self.child.take() else {
            return;
        };
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = Command::new("kill")
            .args(["-s", "TERM", "--", &child.id().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if matches!(child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The sources of `e`, joined (reqwest's own message says little).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut parts = Vec::new();
    let mut cur = e.source();
    while let Some(s) = cur {
        parts.push(s.to_string());
        cur = s.source();
    }
    parts.join(": ")
}
