//! The real `flux` CLI against a test [`Registry`]: `flux push artifact` and
//! `flux tag artifact`, with the environment each mode needs (`--creds` for htpasswd and
//! Bearer, `SSL_CERT_FILE` for HTTPS, the push twin for mTLS, `TZ=UTC` so `--reproducible`
//! writes `1970-01-01T00:00:00Z`, an empty `DOCKER_CONFIG` so no ambient login leaks in).
//! The CLI is built by `make flux-cli` (`e2e/flux/build.sh flux`); nothing is built here.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::Registry;
use super::error::RegistryError;
use crate::flux::{CliOutput, FluxBinary, flux_bin_dir, flux_binary};

type Result<T, E = RegistryError> = std::result::Result<T, E>;

/// The `flux` CLI, or an error saying how to build it.
pub fn flux_cli() -> Result<PathBuf> {
    flux_binary(FluxBinary::Cli).ok_or_else(|| RegistryError::FluxMissing {
        path: flux_bin_dir().join(FluxBinary::Cli.file_name()),
    })
}

/// Why `flux push` tests cannot run here (registry or CLI missing), or `None`.
pub fn skip_reason() -> Option<String> {
    super::skip_reason().or_else(|| flux_cli().err().map(|e| e.to_string()))
}

/// Which credentials the CLI gets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Creds {
    /// The registry's own (htpasswd and Bearer modes; none otherwise).
    #[default]
    Registry,
    /// No `--creds`.
    None,
    /// `--creds user:password`.
    Explicit(String, String),
}

/// Options of [`push_artifact_with`].
#[derive(Clone, Debug)]
pub struct PushOptions {
    /// `--reproducible` (created time = the Unix epoch).
    pub reproducible: bool,
    /// `--annotations key=value`, in order.
    pub annotations: Vec<(String, String)>,
    pub creds: Creds,
    /// More arguments, e.g. `--ignore-paths=…`.
    pub extra_args: Vec<String>,
    /// `--timeout` (the process is killed 30 s after it).
    pub timeout: Duration,
}

impl Default for PushOptions {
    fn default() -> Self {
        PushOptions {
            reproducible: true,
            annotations: Vec::new(),
            creds: Creds::Registry,
            extra_args: Vec::new(),
            timeout: Duration::from_secs(120),
        }
    }
}

/// What `flux push artifact -o json` printed.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct PushedArtifact {
    /// `oci://<host>/<repo>@sha256:<hex>` (the host is the push endpoint's).
    pub url: String,
    pub repository: String,
    pub tag: String,
    /// `sha256:<hex>` of the manifest.
    pub digest: String,
}

/// `flux push artifact <reg>/<repo>:<tag> --path=<dir> --source --revision --reproducible`;
/// returns the manifest digest.
pub fn push_artifact(
    reg: &Registry,
    repo: &str,
    tag: &str,
    dir: &Path,
    source: &str,
    revision: &str,
) -> Result<String> {
    push_artifact_with(
        reg,
        repo,
        tag,
        dir,
        source,
        revision,
        &PushOptions::default(),
    )
    .map(|p| p.digest)
}

/// [`push_artifact`] with options; returns the CLI's JSON answer.
pub fn push_artifact_with(
    reg: &Registry,
    repo: &str,
    tag: &str,
    dir: &Path,
    source: &str,
    revision: &str,
    opts: &PushOptions,
) -> Result<PushedArtifact> {
    let endpoint = reg.push_endpoint()?;
    let mut args = vec![
        "push".to_string(),
        "artifact".into(),
        format!("{}:{tag}", endpoint.url(repo)),
        format!("--path={}", dir.display()),
        format!("--source={source}"),
        format!("--revision={revision}"),
        "--output=json".into(),
    ];
    if opts.reproducible {
        args.push("--reproducible".into());
    }
    for (k, v) in &opts.annotations {
        args.push(format!("--annotations={k}={v}"));
    }
    args.extend(opts.extra_args.iter().cloned());
    let out = run_flux(reg, &args, &opts.creds, opts.timeout)?;
    if !out.success() {
        return Err(RegistryError::Flux(format!("flux push failed: {out}")));
    }
    let json = out.stdout.find('{').map_or("", |at| &out.stdout[at..]);
    let pushed: PushedArtifact = serde_json::from_str(json).map_err(|e| {
        RegistryError::Flux(format!("flux push printed no JSON answer ({e}): {out}"))
    })?;
    let hex = pushed.digest.strip_prefix("sha256:").unwrap_or("");
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(RegistryError::Flux(format!(
            "flux push printed digest {:?}: {out}",
            pushed.digest
        )));
    }
    Ok(pushed)
}

/// `flux tag artifact <reg>/<repo>:<from_tag> --tag <new_tag>`.
pub fn tag_artifact(reg: &Registry, repo: &str, from_tag: &str, new_tag: &str) -> Result<()> {
    let endpoint = reg.push_endpoint()?;
    let args = vec![
        "tag".to_string(),
        "artifact".into(),
        format!("{}:{from_tag}", endpoint.url(repo)),
        format!("--tag={new_tag}"),
    ];
    let out = run_flux(reg, &args, &Creds::Registry, Duration::from_secs(120))?;
    if !out.success() {
        return Err(RegistryError::Flux(format!("flux tag failed: {out}")));
    }
    Ok(())
}

/// Runs `flux <args>` for `reg` (creds, CA, clean Docker config, `TZ=UTC`), with `--timeout`
/// and a wall-clock limit 30 s beyond it. A non-zero exit is not an error here.
pub fn run_flux(
    reg: &Registry,
    args: &[String],
    creds: &Creds,
    timeout: Duration,
) -> Result<CliOutput> {
    let cli = flux_cli()?;
    let endpoint = reg.push_endpoint()?;
    let work = tempfile::Builder::new()
        .prefix("rflux-flux-cli-")
        .tempdir()
        .map_err(|e| RegistryError::io("creating the flux CLI's directory", e))?;
    let docker_config = work.path().join("docker");
    std::fs::create_dir_all(&docker_config)
        .map_err(|e| RegistryError::io("creating an empty DOCKER_CONFIG", e))?;
    let mut all: Vec<String> = args.to_vec();
    let creds = match creds {
        Creds::Registry => reg
            .credentials()
            .map(|(u, p)| (u.to_string(), p.to_string())),
        Creds::None => None,
        Creds::Explicit(u, p) => Some((u.clone(), p.clone())),
    };
    if let Some((u, p)) = &creds {
        all.push(format!("--creds={u}:{p}"));
    }
    all.push(format!("--timeout={}s", timeout.as_secs().max(1)));
    let stdout_path = work.path().join("stdout");
    let stderr_path = work.path().join("stderr");
    let file = |p: &Path| {
        std::fs::File::create(p)
            .map_err(|e| RegistryError::io(format!("creating {}", p.display()), e))
    };
    let mut cmd = Command::new(&cli);
    cmd.args(&all)
        .current_dir(work.path())
        .env("TZ", "UTC")
        .env("DOCKER_CONFIG", &docker_config)
        .env("KUBECONFIG", work.path().join("no-kubeconfig"))
        .stdin(Stdio::null())
        .stdout(file(&stdout_path)?)
        .stderr(file(&stderr_path)?);
    match endpoint.ca_path() {
        Some(ca) => cmd.env("SSL_CERT_FILE", ca),
        None => cmd.env_remove("SSL_CERT_FILE"),
    };
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| RegistryError::io(format!("running {}", cli.display()), e))?;
    let limit = timeout + Duration::from_secs(30);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if started.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(RegistryError::io("waiting for the flux CLI", e)),
        }
    };
    let read = |p: &Path| {
        std::fs::read(p)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    };
    let mut stderr = read(&stderr_path);
    if status.is_none() {
        stderr.push_str(&format!("\n(killed after {limit:?})\n"));
    }
    Ok(CliOutput {
        args: all,
        code: status.and_then(|s| s.code()),
        stdout: read(&stdout_path),
        stderr,
        elapsed: started.elapsed(),
    })
}
