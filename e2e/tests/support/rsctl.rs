//! resourceset-controller as a real process for the e2e tests: started from the build's
//! `target/<profile>/` against a control plane, watching only the objects that carry a unique
//! label (so tests sharing a control plane do not reconcile each other's objects), with its
//! log in a temp file, and stopped when the handle is dropped (also when the test panics).
//!
//! Build it first: `cargo build -p resourceset-controller` (`make test` builds every target).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context as _, bail};
use rflux_e2e::ControlPlane;
use rflux_e2e::process::log_tail;

use super::procs::WATCH_LABEL;

/// A running resourceset-controller.
pub struct ResourceSetController {
    child: std::sync::Mutex<Child>,
    log: PathBuf,
    label: String,
    _dir: tempdir::Dir,
}

mod tempdir {
    use std::path::{Path, PathBuf};

    /// A directory removed on drop.
    pub struct Dir(PathBuf);

    impl Dir {
        pub fn new(prefix: &str) -> std::io::Result<Dir> {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            let path =
                std::env::temp_dir().join(format!("{prefix}-{}-{nanos}", std::process::id()));
            std::fs::create_dir_all(&path)?;
            Ok(Dir(path))
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// `target/<profile>` of the running test binary.
fn target_profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let deps = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent().map(Path::to_path_buf).unwrap_or(deps)
    } else {
        deps
    }
}

impl ResourceSetController {
    /// Starts the controller on `cp`, watching objects labelled `WATCH_LABEL=<label>`, with
    /// `RUNTIME_NAMESPACE=<runtime_namespace>` and `extra` flags; no metrics or health server,
    /// no leader election.
    pub fn start(
        cp: &ControlPlane,
        label: &str,
        runtime_namespace: &str,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        let bin = target_profile_dir().join("resourceset-controller");
        if !bin.is_file() {
            bail!(
                "{} is missing: build it first (cargo build -p resourceset-controller)",
                bin.display()
            );
        }
        let dir = tempdir::Dir::new("rsctl")?;
        let log = dir.path().join("resourceset-controller.log");
        let out = std::fs::File::create(&log)?;
        let err = out.try_clone()?;
        let child = Command::new(&bin)
            .arg("--metrics-addr=0")
            .arg("--health-addr=0")
            .arg("--log-level=debug")
            .arg(format!("--watch-label-selector={WATCH_LABEL}={label}"))
            .args(extra)
            .env("KUBECONFIG", cp.kubeconfig_path())
            .env("RUNTIME_NAMESPACE", runtime_namespace)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(ResourceSetController {
            child: std::sync::Mutex::new(child),
            log,
            label: label.to_string(),
            _dir: dir,
        })
    }

    /// The labels that make an object visible to this controller.
    pub fn labels(&self) -> serde_json::Value {
        serde_json::json!({ WATCH_LABEL: self.label })
    }

    /// The last `lines` of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }

    /// Fails with the log tail if the process exited.
    pub fn check_alive(&self) -> anyhow::Result<()> {
        let mut child = match self.child.lock() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        if let Some(status) = child.try_wait()? {
            bail!(
                "resourceset-controller exited ({status}):\n{}",
                self.log_tail(40)
            );
        }
        Ok(())
    }
}

impl Drop for ResourceSetController {
    fn drop(&mut self) {
        let child = match self.child.get_mut() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        let _ = child.kill();
        let _ = child.wait();
    }
}
