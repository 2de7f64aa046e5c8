//! flux-operator as a test oracle for ResourceSets.
//!
//! `e2e/flux-operator/build.sh` builds flux-operator v0.59.0 (AGPL-3.0; we run it, we copy
//! nothing from it) from the Go module proxy into [`bin_dir`]:
//! - `flux-operator`, the CLI: `flux-operator build resourceset -f rset.yaml
//!   [--inputs-from-provider rsip.yaml]` renders a ResourceSet offline with the real builder
//!   ([`build_resourceset`], [`build_resourceset_steps`]);
//! - `flux-operator-manager`, the operator, run out-of-cluster against an e2e control plane
//!   ([`manager`], [`crd_dir`]);
//! - `flux-operator-yaml2json`, our converter (sigs.k8s.io/yaml, the library the CLI prints
//!   with), which turns the CLI's YAML into JSON values.
//!
//! A case directory holds `rset.yaml` (one ResourceSet) and, when it reads providers,
//! `rsip.yaml` (multi-document Static ResourceSetInputProviders); see
//! `e2e/tests/data/resourceset/README.md`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// flux-operator version that `e2e/flux-operator/build.sh` builds.
pub const FLUX_OPERATOR_VERSION: &str = "v0.59.0";

/// Go module of flux-operator.
pub const FLUX_OPERATOR_MODULE: &str = "github.com/controlplaneio-fluxcd/flux-operator";

/// How long one CLI or converter run may take.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Bound on what is read from a child's stdout or stderr.
const MAX_OUTPUT: u64 = 16 << 20;

/// Prefix of the comment line the CLI prints before the objects of a named step.
const STEP_MARKER: &str = "# step: ";

fn home() -> PathBuf {
    std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from)
}

fn env_dir(var: &str, default: &str) -> PathBuf {
    match std::env::var_os(var) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => home().join(default),
    }
}

/// Where `build.sh` installs the binaries (`RFLUX_FLUX_OPERATOR_BIN`, default
/// `$HOME/.cache/gitops-e2e/flux-operator-bin`).
pub fn bin_dir() -> PathBuf {
    env_dir(
        "RFLUX_FLUX_OPERATOR_BIN",
        ".cache/gitops-e2e/flux-operator-bin",
    )
}

/// Where `build.sh` keeps its writable copy of the module (`RFLUX_FLUX_OPERATOR_SRC`).
pub fn src_dir() -> PathBuf {
    env_dir(
        "RFLUX_FLUX_OPERATOR_SRC",
        ".cache/gitops-e2e/flux-operator-src",
    )
}

/// `dir/name` when the binary and its build stamp (`.name.stamp`) are both present.
fn built(name: &str) -> Option<PathBuf> {
    let dir = bin_dir();
    let path = dir.join(name);
    let stamp = dir.join(format!(".{name}.stamp"));
    (path.is_file() && stamp.is_file()).then_some(path)
}

/// The `flux-operator` CLI, when built.
pub fn cli() -> Option<PathBuf> {
    built("flux-operator")
}

/// The operator manager (`./cmd/operator`, FIPS mode built in), when built.
pub fn manager() -> Option<PathBuf> {
    built("flux-operator-manager")
}

/// Our YAML-to-JSON converter, when built.
pub fn yaml2json() -> Option<PathBuf> {
    built("flux-operator-yaml2json")
}

/// `config/crd/bases` of the flux-operator module (the four CRDs: FluxInstance, FluxReport,
/// ResourceSet, ResourceSetInputProvider): the Go module cache first (`GOMODCACHE`, else
/// `$GOPATH/pkg/mod`, else `$HOME/go/pkg/mod`), then the build's copy in [`src_dir`].
pub fn crd_dir() -> Option<PathBuf> {
    let module_dir = format!("{FLUX_OPERATOR_MODULE}@{FLUX_OPERATOR_VERSION}");
    let mut caches = Vec::new();
    if let Some(d) = std::env::var_os("GOMODCACHE").filter(|d| !d.is_empty()) {
        caches.push(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("GOPATH").filter(|d| !d.is_empty()) {
        caches.push(PathBuf::from(d).join("pkg/mod"));
    }
    caches.push(home().join("go/pkg/mod"));
    caches
        .into_iter()
        .map(|c| c.join(&module_dir))
        .chain([src_dir().join(format!("flux-operator-{FLUX_OPERATOR_VERSION}"))])
        .map(|d| d.join("config/crd/bases"))
        .find(|d| d.is_dir())
}

/// The objects of one step as the CLI printed them. `name` is `None` for a ResourceSet
/// without steps (the CLI prints no step header then).
#[derive(Clone, Debug, PartialEq)]
pub struct BuiltStep {
    /// Step name from the `# step: <name>` header.
    pub name: Option<String>,
    /// The step's objects in printed order.
    pub objects: Vec<Value>,
}

/// Runs `flux-operator build resourceset` on `case_dir` (`rset.yaml`, plus
/// `--inputs-from-provider rsip.yaml` when that file exists) and returns the generated objects
/// in printed order (all steps concatenated). An error carries the CLI's message, e.g.
/// `no objects were generated`.
pub fn build_resourceset(case_dir: &Path) -> Result<Vec<Value>, String> {
    Ok(build_resourceset_steps(case_dir)?
        .into_iter()
        .flat_map(|s| s.objects)
        .collect())
}

/// Like [`build_resourceset`], grouped by step. The CLI prints no header for a step that
/// generated nothing, so such a step is absent here.
pub fn build_resourceset_steps(case_dir: &Path) -> Result<Vec<BuiltStep>, String> {
    let text = build_resourceset_raw(case_dir)?;
    split_steps(&text)
        .into_iter()
        .map(|(name, yaml)| {
            Ok(BuiltStep {
                name,
                objects: yaml_to_json(&yaml)?,
            })
        })
        .collect()
}

/// The CLI's stdout for `case_dir`, unparsed.
pub fn build_resourceset_raw(case_dir: &Path) -> Result<String, String> {
    let cli = cli().ok_or_else(|| {
        format!(
            "the flux-operator CLI is not built in {} (run e2e/flux-operator/build.sh)",
            bin_dir().display()
        )
    })?;
    let rset = case_dir.join("rset.yaml");
    if !rset.is_file() {
        return Err(format!("{} does not exist", rset.display()));
    }
    let mut cmd = Command::new(&cli);
    cmd.args(["build", "resourceset", "-f"]).arg(&rset);
    let rsip = case_dir.join("rsip.yaml");
    if rsip.is_file() {
        cmd.arg("--inputs-from-provider").arg(&rsip);
    }
    // Offline: no kubeconfig is read for a build, keep it that way.
    cmd.env("KUBECONFIG", "/dev/null");
    let out = run_bounded(&mut cmd, None)?;
    if !out.success {
        return Err(format!(
            "flux-operator build resourceset -f {} failed ({}): {}",
            rset.display(),
            out.status,
            out.stderr.trim()
        ));
    }
    Ok(out.stdout)
}

/// Converts multi-document YAML (documents separated by `---` lines) to JSON values in order
/// with `flux-operator-yaml2json`; empty and comment-only documents are left out.
pub fn yaml_to_json(yaml: &str) -> Result<Vec<Value>, String> {
    let tool = yaml2json().ok_or_else(|| {
        format!(
            "flux-operator-yaml2json is not built in {} (run e2e/flux-operator/build.sh)",
            bin_dir().display()
        )
    })?;
    let out = run_bounded(&mut Command::new(&tool), Some(yaml.as_bytes()))?;
    if !out.success {
        return Err(format!(
            "flux-operator-yaml2json failed ({}): {}",
            out.status,
            out.stderr.trim()
        ));
    }
    out.stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Value>(l).map_err(|e| format!("yaml2json output: {e}")))
        .filter(|v| !matches!(v, Ok(Value::Null)))
        .collect()
}

/// Splits the CLI output at its `# step: <name>` header lines. Text before the first header
/// (the whole output of a steps-less ResourceSet) is an unnamed step when it is not blank.
pub fn split_steps(text: &str) -> Vec<(Option<String>, String)> {
    let mut steps: Vec<(Option<String>, String)> = Vec::new();
    let mut name: Option<String> = None;
    let mut body = String::new();
    for line in text.split_inclusive('\n') {
        if let Some(rest) = line.strip_prefix(STEP_MARKER) {
            if name.is_some() || !body.trim().is_empty() {
                steps.push((name.take(), std::mem::take(&mut body)));
            }
            name = Some(rest.trim_end().to_string());
            continue;
        }
        body.push_str(line);
    }
    if name.is_some() || !body.trim().is_empty() {
        steps.push((name, body));
    }
    steps
}

/// What a bounded run produced.
struct Bounded {
    success: bool,
    status: String,
    stdout: String,
    stderr: String,
}

/// Runs `cmd` with `stdin`, at most [`RUN_TIMEOUT`], reading at most [`MAX_OUTPUT`] bytes of
/// each output stream; a run over time is killed.
fn run_bounded(cmd: &mut Command, stdin: Option<&[u8]>) -> Result<Bounded, String> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting {program}: {e}"))?;
    let writer = match (stdin, child.stdin.take()) {
        (Some(bytes), Some(mut pipe)) => {
            let bytes = bytes.to_vec();
            Some(std::thread::spawn(move || {
                // A child that exits early closes the pipe: its status tells what happened.
                let _ = pipe.write_all(&bytes);
            }))
        }
        _ => None,
    };
    let stdout = child.stdout.take().map(reader);
    let stderr = child.stderr.take().map(reader);
    let deadline = Instant::now() + RUN_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{program} did not finish within {RUN_TIMEOUT:?}"));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("waiting for {program}: {e}")),
        }
    };
    if let Some(w) = writer {
        let _ = w.join();
    }
    let collect = |h: Option<std::thread::JoinHandle<Vec<u8>>>| {
        h.and_then(|h| h.join().ok())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    };
    Ok(Bounded {
        success: status.success(),
        status: status.to_string(),
        stdout: collect(stdout),
        stderr: collect(stderr),
    })
}

/// Reads a pipe to its end on a thread, keeping at most [`MAX_OUTPUT`] bytes (the rest is
/// drained so the child never blocks on a full pipe).
fn reader<R: Read + Send + 'static>(pipe: R) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut limited = pipe.take(MAX_OUTPUT);
        let _ = limited.read_to_end(&mut kept);
        let _ = std::io::copy(&mut limited.into_inner(), &mut std::io::sink());
        kept
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn output_without_steps_is_one_unnamed_step() {
        let text = "---\nkind: A\n---\nkind: B\n";
        assert_eq!(
            split_steps(text),
            vec![(None, "---\nkind: A\n---\nkind: B\n".to_string())]
        );
        assert!(split_steps("").is_empty());
    }

    #[test]
    fn step_headers_split_the_output() {
        let text = "# step: one\n---\nkind: A\n# step: two\n---\nkind: B\n---\nkind: C\n";
        assert_eq!(
            split_steps(text),
            vec![
                (Some("one".to_string()), "---\nkind: A\n".to_string()),
                (
                    Some("two".to_string()),
                    "---\nkind: B\n---\nkind: C\n".to_string()
                ),
            ]
        );
    }

    #[test]
    fn an_indented_marker_is_content() {
        let text = "---\ndata:\n  x: |\n    # step: no\n";
        assert_eq!(split_steps(text).len(), 1);
        assert_eq!(split_steps(text)[0].0, None);
    }

    #[test]
    fn bounded_run_reports_failure_and_output() {
        let out = run_bounded(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            None,
        )
        .unwrap();
        assert!(!out.success);
        assert_eq!(out.stdout, "out\n");
        assert_eq!(out.stderr, "err\n");
        let cat = run_bounded(&mut Command::new("cat"), Some(b"piped")).unwrap();
        assert!(cat.success);
        assert_eq!(cat.stdout, "piped");
    }
}
