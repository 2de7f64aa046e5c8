//! A git server for tests: `rflux-gitserver` (git http-backend over plain
//! HTTP, HTTPS with basic/bearer auth and HTTPS with mTLS) and Debian's sshd on
//! loopback, serving the bare repositories in `<state>/git/repos`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use serde::{Deserialize, Serialize};

use crate::pki::{self, Usage};
use crate::process::{self, ProcessInfo};
use crate::test_repo::{TestRepo, git_command};
use crate::{
    bin_dir, free_port, lock_file, now_unix, random_suffix, run_cmd, state_root, unique_name,
    write_atomic,
};

/// Name of the git server's state directory under the state root.
pub const GIT_INSTANCE: &str = "git";

const STATE_FILE: &str = "state.json";

/// What the launcher records about the running git server.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GitServerState {
    pub dir: PathBuf,
    pub repos_dir: PathBuf,
    pub work_dir: PathBuf,
    pub http_port: u16,
    pub https_port: u16,
    pub mtls_port: u16,
    pub ssh_port: u16,
    pub username: String,
    pub password: String,
    pub token: String,
    pub ssh_user: String,
    pub ca_cert: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    pub ssh_key: PathBuf,
    pub known_hosts: PathBuf,
    pub processes: Vec<ProcessInfo>,
    pub started_at: u64,
    pub ready: bool,
}

/// The running git server.
#[derive(Clone, Debug)]
pub struct GitServer {
    state: GitServerState,
}

static SHARED: Mutex<Option<&'static GitServer>> = Mutex::new(None);

#[derive(Deserialize)]
struct Ports {
    http: u16,
    https: u16,
    mtls: u16,
}

/// Debian's sshd, or `RFLUX_E2E_SSHD`.
fn sshd_path() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("RFLUX_E2E_SSHD").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    ["/usr/sbin/sshd", "/usr/local/sbin/sshd"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or_else(|| {
            anyhow!("sshd not found: install it with `apt-get install -y openssh-server`")
        })
}

fn current_user() -> String {
    run_cmd(Command::new("id").arg("-un"))
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "root".to_string())
}

impl GitServer {
    /// The git server: reused when running and healthy, otherwise started
    /// (under a file lock) and left running. `rflux-e2e down` stops it.
    pub async fn shared() -> anyhow::Result<&'static GitServer> {
        if let Some(gs) = *SHARED.lock().map_err(|_| anyhow!("poisoned lock"))? {
            return Ok(gs);
        }
        let gs = tokio::task::spawn_blocking(Self::ensure).await??;
        let mut guard = SHARED.lock().map_err(|_| anyhow!("poisoned lock"))?;
        Ok(*guard.get_or_insert_with(|| Box::leak(Box::new(gs))))
    }

    /// Reuses the running git server when healthy, otherwise (re)starts it.
    pub fn ensure() -> anyhow::Result<GitServer> {
        let _lock = lock_file(&state_root().join(format!("{GIT_INSTANCE}.lock")))?;
        if let Some(gs) = Self::load()? {
            if gs.is_healthy() {
                return Ok(gs);
            }
            eprintln!("rflux-e2e: git server is not healthy; restarting it");
        }
        crate::ensure_gitserver_binary()?;
        // The sshd port is picked before sshd binds it: retry once.
        Self::start().or_else(|e| {
            eprintln!("rflux-e2e: first start of the git server failed, retrying: {e:#}");
            Self::start()
        })
    }

    /// Reads the state file, if any.
    pub fn load() -> anyhow::Result<Option<GitServer>> {
        let path = state_root().join(GIT_INSTANCE).join(STATE_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => {
                let state: GitServerState = serde_json::from_slice(&bytes)
                    .with_context(|| format!("parsing {}", path.display()))?;
                Ok(Some(GitServer { state }))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    /// Processes alive, `/healthz` answers and sshd sends its banner.
    pub fn is_healthy(&self) -> bool {
        self.state.ready
            && self.state.processes.iter().all(process::is_alive)
            && healthz(self.state.http_port).is_ok()
            && ssh_banner(self.state.ssh_port).is_ok()
    }

    /// Stops the git server and removes its state (repos included).
    pub fn stop() -> anyhow::Result<bool> {
        let dir = state_root().join(GIT_INSTANCE);
        let existed = dir.exists();
        if let Some(gs) = Self::load()? {
            for name in process::stop(&gs.state.processes, Duration::from_secs(10)) {
                eprintln!("rflux-e2e: {name} did not stop on SIGTERM; killed");
            }
        }
        if existed {
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        Ok(existed)
    }

    /// Starts a fresh git server (the `rflux-gitserver` binary must exist).
    pub fn start() -> anyhow::Result<GitServer> {
        Self::stop()?;
        let dir = state_root().join(GIT_INSTANCE);
        let mut gs = prepare(&dir)?;
        match gs.launch() {
            Ok(()) => Ok(gs),
            Err(e) => {
                let logs: Vec<String> = gs
                    .state
                    .processes
                    .iter()
                    .map(|p| format!("--- {}:\n{}", p.name, process::log_tail(&p.log, 15)))
                    .collect();
                process::stop(&gs.state.processes, Duration::from_secs(5));
                Err(e.context(format!("starting the git server\n{}", logs.join("\n"))))
            }
        }
    }

    fn launch(&mut self) -> anyhow::Result<()> {
        let dir = self.state.dir.clone();
        let pki_dir = dir.join("pki");
        let ports_file = dir.join("ports.json");
        let args: Vec<String> = vec![
            format!("-root={}", self.state.repos_dir.display()),
            "-http=127.0.0.1:0".into(),
            "-https=127.0.0.1:0".into(),
            "-mtls=127.0.0.1:0".into(),
            format!("-cert={}", pki_dir.join("server.crt").display()),
            format!("-key={}", pki_dir.join("server.key").display()),
            format!("-client-ca={}", self.state.ca_cert.display()),
            format!("-users={}", dir.join("users").display()),
            format!("-tokens={}", dir.join("tokens").display()),
            format!("-ports-file={}", ports_file.display()),
        ];
        let info = process::spawn(
            "rflux-gitserver",
            &bin_dir().join("rflux-gitserver"),
            &args,
            &dir,
            &dir.join("logs/rflux-gitserver.log"),
        )?;
        self.state.processes.push(info.clone());
        self.save()?;
        let deadline = Instant::now() + Duration::from_secs(20);
        let ports: Ports = loop {
            if let Ok(bytes) = std::fs::read(&ports_file) {
                break serde_json::from_slice(&bytes).context("parsing ports.json")?;
            }
            if !process::is_alive(&info) {
                bail!("rflux-gitserver exited");
            }
            if Instant::now() >= deadline {
                bail!("rflux-gitserver did not report its ports");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        self.state.http_port = ports.http;
        self.state.https_port = ports.https;
        self.state.mtls_port = ports.mtls;
        self.save()?;

        // sshd on loopback with its own config, host key and authorized key.
        let ssh_dir = dir.join("ssh");
        let port = free_port()?;
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {host}\nAuthorizedKeysFile {auth}\n\
             PidFile {pid}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
             PubkeyAuthentication yes\nPermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\n\
             AllowUsers {user}\nAcceptEnv GIT_PROTOCOL\nPrintMotd no\nLogLevel VERBOSE\n",
            host = ssh_dir.join("ssh_host_ed25519_key").display(),
            auth = ssh_dir.join("authorized_keys").display(),
            pid = ssh_dir.join("sshd.pid").display(),
            user = self.state.ssh_user,
        );
        let config_path = ssh_dir.join("sshd_config");
        std::fs::write(&config_path, config)?;
        // sshd insists on its privilege separation directory.
        let _ = std::fs::create_dir_all("/run/sshd");
        let sshd = sshd_path()?;
        let info = process::spawn(
            "sshd",
            &sshd,
            &[
                "-D".into(),
                "-e".into(),
                "-f".into(),
                config_path.display().to_string(),
            ],
            &dir,
            &dir.join("logs/sshd.log"),
        )?;
        self.state.ssh_port = port;
        self.state.processes.push(info.clone());
        self.save()?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while let Err(e) = ssh_banner(port) {
            if !process::is_alive(&info) {
                bail!("sshd exited");
            }
            if Instant::now() >= deadline {
                return Err(e.context("sshd did not answer"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let host_pub = std::fs::read_to_string(ssh_dir.join("ssh_host_ed25519_key.pub"))?;
        let mut fields = host_pub.split_whitespace();
        let (kind, key) = (
            fields.next().unwrap_or_default(),
            fields.next().unwrap_or_default(),
        );
        std::fs::write(
            &self.state.known_hosts,
            format!("[127.0.0.1]:{port} {kind} {key}\n"),
        )?;
        healthz(self.state.http_port)?;
        self.state.ready = true;
        self.save()
    }

    fn save(&self) -> anyhow::Result<()> {
        write_atomic(
            &self.state.dir.join(STATE_FILE),
            &serde_json::to_vec_pretty(&self.state)?,
        )
    }

    fn repo_path(repo: &str) -> String {
        let repo = repo.trim_matches('/');
        if repo.ends_with(".git") {
            repo.to_string()
        } else {
            format!("{repo}.git")
        }
    }

    /// `http://127.0.0.1:<port>/<repo>.git`: anonymous read/write; credentials,
    /// when sent, must be valid.
    pub fn http_url(&self, repo: &str) -> String {
        format!(
            "http://127.0.0.1:{}/{}",
            self.state.http_port,
            Self::repo_path(repo)
        )
    }

    /// `https://127.0.0.1:<port>/<repo>.git`: needs [`Self::basic_auth`] or
    /// [`Self::bearer_token`]; the certificate is signed by [`Self::ca_pem`].
    pub fn https_url(&self, repo: &str) -> String {
        format!(
            "https://127.0.0.1:{}/{}",
            self.state.https_port,
            Self::repo_path(repo)
        )
    }

    /// `https://127.0.0.1:<port>/<repo>.git`: needs the client certificate
    /// [`Self::client_cert_pem`]; no other credentials.
    pub fn mtls_url(&self, repo: &str) -> String {
        format!(
            "https://127.0.0.1:{}/{}",
            self.state.mtls_port,
            Self::repo_path(repo)
        )
    }

    /// `ssh://<user>@127.0.0.1:<port>/<abs path>/<repo>.git`; needs
    /// [`Self::ssh_private_key_pem`] and [`Self::known_hosts_line`].
    pub fn ssh_url(&self, repo: &str) -> String {
        format!(
            "ssh://{}@127.0.0.1:{}{}/{}",
            self.state.ssh_user,
            self.state.ssh_port,
            self.state.repos_dir.display(),
            Self::repo_path(repo)
        )
    }

    /// PEM of the CA that signs the HTTPS server and the mTLS client certificate.
    pub fn ca_pem(&self) -> String {
        std::fs::read_to_string(&self.state.ca_cert).unwrap_or_default()
    }

    /// (username, password) accepted by the HTTP(S) listeners.
    pub fn basic_auth(&self) -> (String, String) {
        (self.state.username.clone(), self.state.password.clone())
    }

    /// Bearer token accepted by the HTTP(S) listeners.
    pub fn bearer_token(&self) -> String {
        self.state.token.clone()
    }

    /// The authorized SSH private key (OpenSSH format, ed25519).
    pub fn ssh_private_key_pem(&self) -> String {
        std::fs::read_to_string(&self.state.ssh_key).unwrap_or_default()
    }

    /// `[127.0.0.1]:<port> ssh-ed25519 AAAA…` for a known_hosts file.
    pub fn known_hosts_line(&self) -> String {
        std::fs::read_to_string(&self.state.known_hosts)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    }

    /// (certificate PEM, private key PEM) accepted by the mTLS listener.
    pub fn client_cert_pem(&self) -> (String, String) {
        (
            std::fs::read_to_string(&self.state.client_cert).unwrap_or_default(),
            std::fs::read_to_string(&self.state.client_key).unwrap_or_default(),
        )
    }

    /// Paths of the same material, for CLI tools: CA, SSH key, known_hosts,
    /// client cert, client key.
    pub fn ca_path(&self) -> &Path {
        &self.state.ca_cert
    }
    pub fn ssh_key_path(&self) -> &Path {
        &self.state.ssh_key
    }
    pub fn known_hosts_path(&self) -> &Path {
        &self.state.known_hosts
    }
    pub fn client_cert_path(&self) -> &Path {
        &self.state.client_cert
    }
    pub fn client_key_path(&self) -> &Path {
        &self.state.client_key
    }

    /// Directory of the bare repositories.
    pub fn repos_dir(&self) -> &Path {
        &self.state.repos_dir
    }

    /// The recorded state (ports, processes, credentials).
    pub fn state(&self) -> &GitServerState {
        &self.state
    }

    /// Sum of the resident set sizes of the server processes, in KiB.
    pub fn rss_kib(&self) -> u64 {
        self.state
            .processes
            .iter()
            .filter_map(|p| process::rss_kib(p.pid))
            .sum()
    }

    /// Creates a bare repository `<name>-<random>.git` (default branch `main`)
    /// and a work tree whose `origin` is that repository.
    pub fn create_repo(&self, name: &str) -> anyhow::Result<TestRepo> {
        let unique = unique_name(name);
        let bare = self.state.repos_dir.join(format!("{unique}.git"));
        let work = self.state.work_dir.join(&unique);
        run_cmd(
            git_command(&self.state.repos_dir)
                .args(["init", "-q", "--bare", "-b", "main"])
                .arg(&bare),
        )?;
        run_cmd(git_command(&bare).args(["config", "http.receivepack", "true"]))?;
        std::fs::create_dir_all(&work)?;
        run_cmd(git_command(&work).args(["init", "-q", "-b", "main"]))?;
        for (k, v) in [
            ("user.name", "rflux e2e"),
            ("user.email", "e2e@rflux.test"),
            ("commit.gpgsign", "false"),
            ("tag.gpgsign", "false"),
        ] {
            run_cmd(git_command(&work).args(["config", k, v]))?;
        }
        run_cmd(
            git_command(&work)
                .args(["remote", "add", "origin"])
                .arg(&bare),
        )?;
        Ok(TestRepo::new(unique, work, bare))
    }
}

/// State directory, PKI, credentials and SSH keys.
fn prepare(dir: &Path) -> anyhow::Result<GitServer> {
    let pki_dir = dir.join("pki");
    let ssh_dir = dir.join("ssh");
    for d in ["pki", "ssh", "repos", "work", "logs"] {
        std::fs::create_dir_all(dir.join(d))
            .with_context(|| format!("creating {}", dir.join(d).display()))?;
    }
    let ca = pki::create_ca(&pki_dir, "ca", "rflux-e2e-git-ca")?;
    pki::issue(
        &ca,
        &pki_dir,
        "server",
        "/CN=rflux-e2e-git",
        &["IP:127.0.0.1", "DNS:localhost"],
        Usage::Server,
    )?;
    let client = pki::issue(
        &ca,
        &pki_dir,
        "client",
        "/CN=rflux-e2e-git-client",
        &[],
        Usage::Client,
    )?;
    let username = "git-user".to_string();
    let password = random_suffix(24);
    let token = random_suffix(40);
    std::fs::write(dir.join("users"), format!("{username}:{password}\n"))?;
    std::fs::write(dir.join("tokens"), format!("{token}\n"))?;
    for (file, comment) in [
        ("ssh_host_ed25519_key", "rflux-e2e-host"),
        ("id_ed25519", "rflux-e2e-client"),
    ] {
        run_cmd(
            Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f"])
                .arg(ssh_dir.join(file)),
        )?;
    }
    std::fs::copy(
        ssh_dir.join("id_ed25519.pub"),
        ssh_dir.join("authorized_keys"),
    )?;
    let gs = GitServer {
        state: GitServerState {
            dir: dir.to_path_buf(),
            repos_dir: dir.join("repos"),
            work_dir: dir.join("work"),
            http_port: 0,
            https_port: 0,
            mtls_port: 0,
            ssh_port: 0,
            username,
            password,
            token,
            ssh_user: current_user(),
            ca_cert: ca.cert,
            client_cert: client.cert,
            client_key: client.key,
            ssh_key: ssh_dir.join("id_ed25519"),
            known_hosts: ssh_dir.join("known_hosts"),
            processes: Vec::new(),
            started_at: now_unix(),
            ready: false,
        },
    };
    gs.save()?;
    Ok(gs)
}

fn healthz(port: u16) -> anyhow::Result<()> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    std::io::Write::write_all(
        &mut stream,
        b"GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n",
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    if response.starts_with("HTTP/1.0 200") || response.starts_with("HTTP/1.1 200") {
        Ok(())
    } else {
        bail!("git server /healthz: {response}")
    }
}

fn ssh_banner(port: u16) -> anyhow::Result<()> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut buf = [0u8; 64];
    let n = stream.read(&mut buf)?;
    if buf[..n].starts_with(b"SSH-2.0") {
        Ok(())
    } else {
        bail!("no SSH banner on port {port}")
    }
}
