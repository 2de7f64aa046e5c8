//! Test support shared by the controller binaries' CLI tests (feature `testing`).
//!
//! [`CliCheck`] runs the checks every controller binary must pass: it fails cleanly without a
//! cluster, refuses unknown flags, lists Flux's flags in `--help`, serves its probes and metrics
//! against a minimal API server, and exits 0 on SIGTERM.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// What to check for one controller binary.
pub struct CliCheck<'a> {
    /// Path of the binary (`env!("CARGO_BIN_EXE_<name>")`).
    pub bin: &'a str,
    /// Flags its `--help` must list besides the shared ones.
    pub help_flags: &'a [&'a str],
    /// Extra arguments for a run against the fake API server; `{dir}` is a scratch directory.
    pub run_args: &'a [&'a str],
    /// A metrics line the running binary must expose.
    pub expected_metric: &'a str,
}

impl CliCheck<'_> {
    /// Without any Kubernetes configuration the binary exits 1 with a clear error.
    pub fn fails_cleanly_without_kubeconfig(&self) {
        let home = scratch_dir();
        let out = Command::new(self.bin)
            .args(["--metrics-addr=127.0.0.1:0", "--health-addr=127.0.0.1:0"])
            .env("KUBECONFIG", home.join("missing-kubeconfig"))
            .env("HOME", &home)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("no Kubernetes configuration found"),
            "{stderr}"
        );
        let _ = std::fs::remove_dir_all(&home);
    }

    /// An unknown flag is a usage error (exit 2), as with Go's flag package.
    pub fn rejects_unknown_flags(&self) {
        let out = Command::new(self.bin)
            .arg("--definitely-not-a-flag")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
    }

    /// `--help` lists the shared Flux flags and the binary's own.
    pub fn help_lists_flux_flags(&self) {
        let out = Command::new(self.bin).arg("--help").output().unwrap();
        assert!(out.status.success());
        let help = String::from_utf8_lossy(&out.stdout);
        for flag in ["--enable-leader-election", "--metrics-addr", "--concurrent"]
            .iter()
            .chain(self.help_flags)
        {
            assert!(help.contains(flag), "missing {flag} in help");
        }
    }

    /// Against a minimal API server the probes and `/metrics` come up, and SIGTERM exits 0.
    pub fn serves_probes_and_exits_zero_on_sigterm(&self) {
        let api = fake_apiserver();
        let dir = scratch_dir();
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, kubeconfig_for(api)).unwrap();
        let health = free_port();
        let metrics = free_port();
        let dir_str = dir.display().to_string();
        let mut child = KillOnDrop(
            Command::new(self.bin)
                .args([
                    format!("--kubeconfig={}", kubeconfig.display()),
                    format!("--health-addr=127.0.0.1:{health}"),
                    format!("--metrics-addr=127.0.0.1:{metrics}"),
                ])
                .args(self.run_args.iter().map(|a| a.replace("{dir}", &dir_str)))
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let child = &mut child.0;
        let deadline = Instant::now() + Duration::from_secs(20);
        while http_get(health, "/readyz").map(|r| r.0) != Some(200) {
            assert!(Instant::now() < deadline, "readyz never became 200");
            assert!(
                child.try_wait().unwrap().is_none(),
                "controller exited early"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(http_get(health, "/healthz").map(|r| r.0), Some(200));
        // Readiness comes with the client; the controller registers its series right after.
        let deadline = Instant::now() + Duration::from_secs(20);
        let body = loop {
            let body = http_get(metrics, "/metrics").unwrap().1;
            if body.contains(self.expected_metric) || Instant::now() > deadline {
                break body;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        // The /version probe went through the instrumented, throttled client.
        let series = format!(
            "rest_client_requests_total{{code=\"200\",host=\"127.0.0.1:{api}\",method=\"GET\"}} "
        );
        assert!(body.contains(&series), "{body}");
        assert!(body.contains("go_info{version=\"rflux-"), "{body}");
        assert!(body.contains(self.expected_metric), "{body}");
        let kill = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "controller did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        assert_eq!(status.code(), Some(0), "{stderr}");
        assert!(stderr.contains("shutting down gracefully"), "{stderr}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Kills the child process when a failed assertion unwinds past it.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A free loopback port (bind, read, release).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A fresh scratch directory under the system temp dir, unique within and across processes.
pub fn scratch_dir() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let d = std::env::temp_dir().join(format!(
        "rflux-cli-{}-{}-{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir(&d).unwrap();
    d
}

/// A kubeconfig pointing at `http://127.0.0.1:<port>` with an anonymous user.
pub fn kubeconfig_for(port: u16) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://127.0.0.1:{port}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\ncurrent-context: fake\nusers:\n- name: fake\n  user: {{}}\n"
    )
}

/// A minimal HTTP server answering every request with a Kubernetes `/version` document.
pub fn fake_apiserver() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || serve_version(stream));
        }
    });
    port
}

fn serve_version(mut stream: TcpStream) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                break;
            }
        }
        let body = r#"{"major":"1","minor":"35","gitVersion":"v1.35.0","gitCommit":"x","gitTreeState":"clean","buildDate":"2026-01-01T00:00:00Z","goVersion":"go1.25","compiler":"gc","platform":"linux/amd64"}"#;
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
            body.len(),
            body
        );
        if stream.write_all(resp.as_bytes()).is_err() {
            return;
        }
    }
}

/// `GET path` over HTTP/1.1 on loopback: the status code and the body.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let code = out.split(' ').nth(1)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((code, body))
}
