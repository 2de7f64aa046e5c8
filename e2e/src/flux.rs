//! Flux's own binaries for interop tests: the `flux` CLI, Flux's source-controller and
//! kustomize-controller, built from the Go module proxy by `e2e/flux/build.sh` into
//! [`flux_bin_dir`] (`RFLUX_FLUX_BIN`, default `$HOME/.cache/gitops-e2e/flux-bin`).
//!
//! Also: [`Controller`], a controller process (ours or Flux's) that is stopped when dropped, and
//! [`rflux_binary`], which finds one of our controller binaries.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use rflux_e2e::flux::{FluxBinary, ensure_flux_binaries, FluxCli};
//! let bins = ensure_flux_binaries(&[FluxBinary::Cli])?;   // builds when missing (long, once)
//! let cli = FluxCli::new(&bins[0], std::path::Path::new("kubeconfig"));
//! let out = cli.run(&["get", "sources", "git", "-n", "ns"])?;
//! assert!(out.success(), "{out}");
//! # Ok(()) }
//! ```

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::{free_port, lock_file, repo_root};

/// One of Flux's binaries that `e2e/flux/build.sh` builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FluxBinary {
    /// The `flux` CLI (flux2).
    Cli,
    /// Flux's source-controller.
    SourceController,
    /// Flux's kustomize-controller.
    KustomizeController,
}

impl FluxBinary {
    /// File name in [`flux_bin_dir`].
    pub fn file_name(self) -> &'static str {
        match self {
            FluxBinary::Cli => "flux",
            FluxBinary::SourceController => "flux-source-controller",
            FluxBinary::KustomizeController => "flux-kustomize-controller",
        }
    }

    /// The argument `e2e/flux/build.sh` takes for it.
    fn build_arg(self) -> &'static str {
        match self {
            FluxBinary::Cli => "flux",
            FluxBinary::SourceController => "source-controller",
            FluxBinary::KustomizeController => "kustomize-controller",
        }
    }
}

fn home() -> PathBuf {
    std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from)
}

fn env_dir(var: &str, default: &str) -> PathBuf {
    match std::env::var_os(var) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => home().join(default),
    }
}

/// Where Flux's binaries are installed (`RFLUX_FLUX_BIN`).
pub fn flux_bin_dir() -> PathBuf {
    env_dir("RFLUX_FLUX_BIN", ".cache/gitops-e2e/flux-bin")
}

/// Where `build.sh` unpacks the module sources (`RFLUX_FLUX_SRC`).
pub fn flux_src_dir() -> PathBuf {
    env_dir("RFLUX_FLUX_SRC", ".cache/gitops-e2e/flux-src")
}

/// The path of `bin` when it is built and its build stamp is present.
pub fn flux_binary(bin: FluxBinary) -> Option<PathBuf> {
    let dir = flux_bin_dir();
    let path = dir.join(bin.file_name());
    let stamp = dir.join(format!(".{}.stamp", bin.file_name()));
    (path.is_file() && stamp.is_file()).then_some(path)
}

/// `module@version` that `bin` was built from (its build stamp).
pub fn flux_binary_version(bin: FluxBinary) -> Option<String> {
    let stamp = flux_bin_dir().join(format!(".{}.stamp", bin.file_name()));
    std::fs::read_to_string(stamp)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Returns the paths of `bins` (in order), building the missing ones with `e2e/flux/build.sh`
/// under a file lock in the bin dir. A cold build of all three takes tens of minutes.
pub fn ensure_flux_binaries(bins: &[FluxBinary]) -> anyhow::Result<Vec<PathBuf>> {
    let missing: Vec<FluxBinary> = bins
        .iter()
        .copied()
        .filter(|b| flux_binary(*b).is_none())
        .collect();
    if !missing.is_empty() {
        let dir = flux_bin_dir();
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let _lock = lock_file(&dir.join(".build.lock"))?;
        let still: Vec<&str> = missing
            .iter()
            .filter(|b| flux_binary(**b).is_none())
            .map(|b| b.build_arg())
            .collect();
        if !still.is_empty() {
            let script = repo_root().join("e2e/flux/build.sh");
            eprintln!(
                "rflux-e2e: building Flux binaries {still:?} with {} (slow the first time)",
                script.display()
            );
            let status = Command::new("bash")
                .arg(&script)
                .args(&still)
                .env("RFLUX_FLUX_BIN", &dir)
                .env("RFLUX_FLUX_SRC", flux_src_dir())
                .stdout(std::io::stderr())
                .status()
                .with_context(|| format!("running {}", script.display()))?;
            if !status.success() {
                bail!("{} failed with {status}", script.display());
            }
        }
    }
    bins.iter()
        .map(|b| {
            flux_binary(*b).with_context(|| format!("{} is missing after the build", b.file_name()))
        })
        .collect()
}

/// Flux's CRD files for the source kinds we do not define (Bucket, HelmRepository, HelmChart,
/// ExternalArtifact), from the source-controller module that `build.sh` unpacked. Flux's
/// controllers watch those kinds and do not start without them. GitRepository and OCIRepository
/// come from our `manifests/crds/` (equal to Flux's, `common/tests/crds.rs`).
pub fn flux_extra_source_crds() -> anyhow::Result<Vec<PathBuf>> {
    let stamp = flux_binary_version(FluxBinary::SourceController)
        .context("Flux's source-controller is not built (no build stamp)")?;
    let version = stamp
        .rsplit_once('@')
        .map(|(_, v)| v.to_string())
        .context("malformed build stamp")?;
    let dir = flux_src_dir()
        .join(format!("flux-source-controller-{version}"))
        .join("config/crd/bases");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "yaml")
                && !p.file_name().is_some_and(|n| {
                    let n = n.to_string_lossy();
                    n.contains("gitrepositories") || n.contains("ocirepositories")
                })
        })
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("no CRD files in {}", dir.display());
    }
    Ok(files)
}

/// Our target directory (`CARGO_TARGET_DIR` or `<repo>/target`).
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) if !d.is_empty() => {
            let d = PathBuf::from(d);
            if d.is_absolute() {
                d
            } else {
                repo_root().join(d)
            }
        }
        _ => repo_root().join("target"),
    }
}

/// The path of our controller binary `name` (`source-controller` or `kustomize-controller`) in
/// the profile directory of the running test executable (`target/debug/deps/<test>` →
/// `target/debug/<name>`), else in `<target_dir>/debug`. It is not built here: cargo holds the
/// build-directory lock while tests run, so build it first (`make test` and `make interop` do).
pub fn rflux_binary(name: &str) -> anyhow::Result<PathBuf> {
    let mut candidates = Vec::new();
    if let Ok(exe) = std::env::current_exe()
        && let Some(profile) = exe.parent().and_then(Path::parent)
    {
        candidates.push(profile.join(name));
    }
    candidates.push(target_dir().join("debug").join(name));
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .with_context(|| {
            format!(
                "{name} is not built (looked at {candidates:?}); run `cargo build -p {name}` first"
            )
        })
}

/// A controller process started by a test. Dropping it sends SIGTERM, then SIGKILL after 10 s.
pub struct Controller {
    name: String,
    child: Option<Child>,
    log: PathBuf,
    /// `127.0.0.1:<port>` of the health endpoint (`/readyz`).
    pub health_addr: String,
    /// `127.0.0.1:<port>` of the metrics endpoint.
    pub metrics_addr: String,
}

impl fmt::Debug for Controller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Controller")
            .field("name", &self.name)
            .field("log", &self.log)
            .finish()
    }
}

impl Controller {
    /// Starts `program` with `args` plus `--metrics-addr`/`--health-addr` on free loopback
    /// ports, `KUBECONFIG=kubeconfig` and `RUNTIME_NAMESPACE=runtime_ns`; output goes to
    /// `<log_dir>/<name>.log`. Waits until `/readyz` answers 200 (up to 60 s).
    pub fn start(
        name: &str,
        program: &Path,
        args: &[String],
        kubeconfig: &Path,
        runtime_ns: &str,
        log_dir: &Path,
    ) -> anyhow::Result<Controller> {
        use std::os::unix::process::CommandExt;
        std::fs::create_dir_all(log_dir)
            .with_context(|| format!("creating {}", log_dir.display()))?;
        let log = log_dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log)
            .with_context(|| format!("creating log {}", log.display()))?;
        let err = out.try_clone()?;
        let health_addr = format!("127.0.0.1:{}", free_port()?);
        let metrics_addr = format!("127.0.0.1:{}", free_port()?);
        let child = Command::new(program)
            .args(args)
            .arg(format!("--metrics-addr={metrics_addr}"))
            .arg(format!("--health-addr={health_addr}"))
            .env("KUBECONFIG", kubeconfig)
            .env("RUNTIME_NAMESPACE", runtime_ns)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {name} ({})", program.display()))?;
        let mut c = Controller {
            name: name.to_string(),
            child: Some(child),
            log,
            health_addr,
            metrics_addr,
        };
        c.wait_ready(Duration::from_secs(60))?;
        Ok(c)
    }

    fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                bail!(
                    "{} exited with {status} before it was ready:\n{}",
                    self.name,
                    self.log_tail(30)
                );
            }
            if http_status(&self.health_addr, "/readyz").is_ok_and(|s| s == 200) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "{} not ready after {timeout:?}:\n{}",
                    self.name,
                    self.log_tail(30)
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The process name given at start.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        crate::process::log_tail(&self.log, lines)
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// SIGTERM, wait up to `grace`, then SIGKILL. Returns whether it exited on SIGTERM.
    pub fn stop(&mut self, grace: Duration) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        if matches!(child.try_wait(), Ok(Some(_))) {
            return true;
        }
        let _ = Command::new("kill")
            .args(["-s", "TERM", "--", &child.id().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if matches!(child.try_wait(), Ok(Some(_))) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(10));
    }
}

/// Status code of `GET http://<addr><path>` (HTTP/1.0, 2 s timeouts).
pub fn http_status(addr: &str, path: &str) -> anyhow::Result<u16> {
    use std::io::{Read, Write};
    let sock: std::net::SocketAddr = addr.parse().context("parsing address")?;
    let mut s = std::net::TcpStream::connect_timeout(&sock, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())?;
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf)?;
    let head = String::from_utf8_lossy(&buf[..n]);
    head.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("no HTTP status line")
}

/// The `flux` CLI bound to one kubeconfig.
#[derive(Clone, Debug)]
pub struct FluxCli {
    path: PathBuf,
    kubeconfig: PathBuf,
}

/// What one `flux` invocation produced.
#[derive(Clone, Debug)]
pub struct CliOutput {
    /// The command line, for messages.
    pub args: Vec<String>,
    /// Exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error (flux logs its progress there).
    pub stderr: String,
    /// Wall time.
    pub elapsed: Duration,
}

impl CliOutput {
    /// Exit code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

impl fmt::Display for CliOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "flux {} -> exit {:?} in {:.1?}\n--- stdout\n{}--- stderr\n{}",
            self.args.join(" "),
            self.code,
            self.elapsed,
            self.stdout,
            self.stderr
        )
    }
}

impl FluxCli {
    /// The CLI at `path`, talking to the cluster of `kubeconfig`.
    pub fn new(path: &Path, kubeconfig: &Path) -> FluxCli {
        FluxCli {
            path: path.to_path_buf(),
            kubeconfig: kubeconfig.to_path_buf(),
        }
    }

    /// Runs `flux <args>` (blocking) and captures its output.
    pub fn run(&self, args: &[&str]) -> anyhow::Result<CliOutput> {
        let started = Instant::now();
        let out = Command::new(&self.path)
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", home())
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {}", self.path.display()))?;
        Ok(CliOutput {
            args: args.iter().map(|s| (*s).to_string()).collect(),
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            elapsed: started.elapsed(),
        })
    }

    /// Like [`FluxCli::run`] on a blocking thread, for async tests.
    pub async fn run_async(&self, args: &[&str]) -> anyhow::Result<CliOutput> {
        let cli = self.clone();
        let args: Vec<String> = args.iter().map(|s| (*s).to_string()).collect();
        tokio::task::spawn_blocking(move || {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            cli.run(&refs)
        })
        .await?
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn controller_process_is_stopped_on_drop() {
        // A tiny HTTP server stands in for a controller's health endpoint: it answers 200 to
        // anything, so start() must see it ready; drop must stop it.
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("fake.sh");
        let server = [
            "import http.server, sys",
            "class H(http.server.BaseHTTPRequestHandler):",
            "    def do_GET(self):",
            "        self.send_response(200)",
            "        self.end_headers()",
            "host, port = sys.argv[1].split(':')",
            "http.server.HTTPServer((host, int(port)), H).serve_forever()",
        ]
        .join("\n");
        std::fs::write(dir.path().join("server.py"), server).unwrap();
        std::fs::write(
            &script,
            format!(
                "for a in \"$@\"; do case $a in --health-addr=*) addr=${{a#--health-addr=}};; esac; done\n\
                 exec python3 {} \"$addr\"\n",
                dir.path().join("server.py").display()
            ),
        )
        .unwrap();
        if Command::new("python3").arg("--version").output().is_err() {
            eprintln!("skipped: python3 is not installed");
            return;
        }
        let mut c = Controller::start(
            "fake",
            Path::new("/bin/sh"),
            &[script.display().to_string()],
            Path::new("/nonexistent"),
            "ns",
            dir.path(),
        )
        .unwrap();
        assert!(c.is_running());
        assert_eq!(http_status(&c.health_addr, "/readyz").unwrap(), 200);
        let addr = c.health_addr.clone();
        drop(c);
        assert!(http_status(&addr, "/readyz").is_err(), "still serving");
    }

    #[test]
    fn failing_process_reports_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let err = Controller::start(
            "false",
            Path::new("/bin/sh"),
            &["-c".into(), "echo broken flag >&2; exit 3".into()],
            Path::new("/nonexistent"),
            "ns",
            dir.path(),
        )
        .unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("broken flag"), "{msg}");
    }
}
