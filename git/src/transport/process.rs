//! upload-pack over a child process's stdin/stdout: the system `ssh` binary
//! (as git does), or a local `git upload-pack` for `file://` URLs.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::task::JoinHandle;

use crate::error::GitError;
use crate::limits::Limits;
use crate::pktline::{BoxReader, PktReader, SectionLimits};
use crate::protocol::{Advertisement, read_advertisement};
use crate::remote::{ProtocolVersion, Remote, SshAuth};

/// Bytes of stderr kept for error messages.
const STDERR_CAP: u64 = 16 * 1024;
/// Environment variable the askpass helper prints.
const ASKPASS_ENV: &str = "RFLUX_GIT_SSH_PASSPHRASE";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Ssh,
    Local,
}

pub(crate) struct ProcConn {
    kind: Kind,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    stderr: Option<JoinHandle<Vec<u8>>>,
    /// Bounds every section of pkt-lines read from stdout.
    limits: SectionLimits,
    /// Key, known_hosts and askpass files; removed on drop.
    _secrets: Option<tempfile::TempDir>,
}

fn write_private(path: &Path, contents: &[u8], mode: u32) -> Result<(), GitError> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| GitError::io("writing SSH material to a temp file", e))?;
    f.write_all(contents)
        .map_err(|e| GitError::io("writing SSH material to a temp file", e))
}

/// Quotes `s` for the remote shell, as git does for the repository path.
fn sq_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

impl ProcConn {
    /// `ssh … git-upload-pack '<path>'`.
    pub(crate) async fn open_ssh(
        remote: &Remote,
        ssh: &SshAuth,
        user: Option<&str>,
        host: &str,
        port: Option<u16>,
        path: &str,
    ) -> Result<(ProcConn, Advertisement), GitError> {
        let dir = tempfile::Builder::new()
            .prefix("rflux-git-ssh-")
            .tempdir()
            .map_err(|e| GitError::io("creating a temp dir for SSH material", e))?;
        let key_path = dir.path().join("identity");
        let mut key = ssh.private_key_pem.clone().into_bytes();
        if !key.ends_with(b"\n") {
            key.push(b'\n');
        }
        write_private(&key_path, &key, 0o600)?;
        let kh_path = dir.path().join("known_hosts");
        let mut kh = ssh.known_hosts.clone().into_bytes();
        if !kh.ends_with(b"\n") {
            kh.push(b'\n');
        }
        write_private(&kh_path, &kh, 0o600)?;

        let program = std::env::var_os("RFLUX_GIT_SSH").unwrap_or_else(|| "ssh".into());
        let mut cmd = Command::new(program);
        cmd.arg("-F").arg("/dev/null");
        cmd.arg("-i").arg(&key_path);
        let mut opt = |o: String| {
            cmd.arg("-o").arg(o);
        };
        opt(format!("UserKnownHostsFile={}", kh_path.display()));
        opt("GlobalKnownHostsFile=/dev/null".into());
        opt("StrictHostKeyChecking=yes".into());
        opt("IdentitiesOnly=yes".into());
        opt("IdentityAgent=none".into());
        opt("PasswordAuthentication=no".into());
        opt("KbdInteractiveAuthentication=no".into());
        opt("LogLevel=ERROR".into());
        opt(format!(
            "ConnectTimeout={}",
            remote.timeout.as_secs().max(1)
        ));
        if remote.protocol == ProtocolVersion::V2 {
            opt("SetEnv=GIT_PROTOCOL=version=2".into());
        }
        if ssh.passphrase.is_some() {
            opt("NumberOfPasswordPrompts=1".into());
        } else {
            opt("BatchMode=yes".into());
        }
        if let Some(p) = port {
            cmd.arg("-p").arg(p.to_string());
        }
        if let Some(u) = ssh.user.as_deref().or(user) {
            cmd.arg("-l").arg(u);
        }
        cmd.arg("--").arg(host);
        cmd.arg(format!("git-upload-pack {}", sq_quote(path)));
        if let Some(pass) = &ssh.passphrase {
            // ssh reads the key passphrase from SSH_ASKPASS when forced; the
            // helper prints it from the environment, so it never touches disk.
            let askpass = dir.path().join("askpass.sh");
            write_private(
                &askpass,
                format!("#!/bin/sh\nprintf '%s\\n' \"${ASKPASS_ENV}\"\n").as_bytes(),
                0o700,
            )?;
            cmd.env("SSH_ASKPASS", &askpass)
                .env("SSH_ASKPASS_REQUIRE", "force")
                .env("DISPLAY", ":0")
                .env(ASKPASS_ENV, pass);
        }
        cmd.env_remove("SSH_AUTH_SOCK");
        Self::spawn(Kind::Ssh, cmd, Some(dir), &remote.limits).await
    }

    /// `git upload-pack <path>` with `GIT_PROTOCOL=version=2`.
    pub(crate) async fn open_local(
        path: &str,
        v2: bool,
        limits: &Limits,
    ) -> Result<(ProcConn, Advertisement), GitError> {
        let mut cmd = Command::new("git");
        cmd.arg("upload-pack").arg("--").arg(path);
        if v2 {
            cmd.env("GIT_PROTOCOL", "version=2");
        } else {
            cmd.env_remove("GIT_PROTOCOL");
        }
        Self::spawn(Kind::Local, cmd, None, limits).await
    }

    async fn spawn(
        kind: Kind,
        mut cmd: Command,
        secrets: Option<tempfile::TempDir>,
        limits: &Limits,
    ) -> Result<(ProcConn, Advertisement), GitError> {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let what = if kind == Kind::Ssh { "ssh" } else { "git" };
        let mut child = cmd
            .spawn()
            .map_err(|e| GitError::io(format!("starting {what}"), e))?;
        let (Some(stdin), Some(stdout), Some(mut stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(GitError::Transport(format!("{what}: missing stdio pipes")));
        };
        let stderr_task = tokio::spawn(async move {
            let mut buf = Vec::new();
            let _ = (&mut stderr).take(STDERR_CAP).read_to_end(&mut buf).await;
            // Keep draining so the child never blocks on a full pipe.
            let _ = tokio::io::copy(&mut stderr, &mut tokio::io::sink()).await;
            buf
        });
        let mut conn = ProcConn {
            kind,
            child,
            stdin: Some(stdin),
            stdout: BufReader::new(stdout),
            stderr: Some(stderr_task),
            limits: limits.into(),
            _secrets: secrets,
        };
        let adv = {
            let mut r = PktReader::with_limits(&mut conn.stdout, conn.limits);
            read_advertisement(&mut r).await
        };
        match adv {
            Ok(adv) => Ok((conn, adv)),
            Err(e) => Err(conn.explain(e).await),
        }
    }

    pub(crate) async fn send(&mut self, body: &[u8]) -> Result<BoxReader<'_>, GitError> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| GitError::Transport("connection already closed".into()))?;
        let written = async {
            stdin.write_all(body).await?;
            stdin.flush().await
        }
        .await;
        if let Err(e) = written {
            let err = GitError::io("writing to upload-pack", e);
            return Err(self.explain(err).await);
        }
        Ok(PktReader::with_limits(
            Box::new(&mut self.stdout),
            self.limits,
        ))
    }

    /// Waits briefly for the child to exit and classifies its stderr. A limit error is
    /// already precise: the child, which may still be sending, is killed at once instead.
    pub(crate) async fn explain(&mut self, err: GitError) -> GitError {
        self.stdin = None;
        if matches!(err, GitError::Limit(_)) {
            let _ = self.child.start_kill();
            return err;
        }
        let _ = tokio::time::timeout(Duration::from_secs(3), self.child.wait()).await;
        let stderr = match self.stderr.take() {
            Some(task) => match tokio::time::timeout(Duration::from_secs(1), task).await {
                Ok(Ok(buf)) => buf,
                _ => Vec::new(),
            },
            None => Vec::new(),
        };
        classify(self.kind, &String::from_utf8_lossy(&stderr), err)
    }

    pub(crate) async fn close(mut self) {
        // Closing stdin ends the session; upload-pack exits on EOF.
        self.stdin = None;
        let _ = tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await;
    }
}

/// Maps ssh/git diagnostics to an error kind; falls back to `err` plus the text.
fn classify(kind: Kind, stderr: &str, err: GitError) -> GitError {
    let msg: String = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    if msg.is_empty() {
        return err;
    }
    let has = |k: &str| msg.contains(k);
    if kind == Kind::Ssh
        && (has("Host key verification failed")
            || has("REMOTE HOST IDENTIFICATION HAS CHANGED")
            || has("host key is known"))
    {
        return GitError::HostKey(msg);
    }
    if has("Permission denied")
        || has("Too many authentication failures")
        || has("incorrect passphrase")
        || has("Load key")
    {
        return GitError::Auth(msg);
    }
    if has("not our ref")
        || has("does not appear to be a git repository")
        || has("not a git repository")
        || has("No such file or directory")
        || has("not found")
    {
        return GitError::NotFound(msg);
    }
    if has("timed out") {
        return GitError::Transport(msg);
    }
    match err {
        GitError::Protocol(_) | GitError::Io { .. } | GitError::Transport(_) => {
            GitError::Transport(format!("{err}; stderr: {msg}"))
        }
        other => other,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn quotes_paths_for_the_remote_shell() {
        assert_eq!(sq_quote("/srv/a b.git"), "'/srv/a b.git'");
        assert_eq!(sq_quote("it's"), "'it'\\''s'");
    }

    #[test]
    fn classifies_ssh_diagnostics() {
        let e = || GitError::protocol("unexpected end of stream");
        assert!(matches!(
            classify(Kind::Ssh, "Host key verification failed.\n", e()),
            GitError::HostKey(_)
        ));
        assert!(matches!(
            classify(Kind::Ssh, "git@h: Permission denied (publickey).\n", e()),
            GitError::Auth(_)
        ));
        assert!(matches!(
            classify(
                Kind::Local,
                "fatal: '/x' does not appear to be a git repository\n",
                e()
            ),
            GitError::NotFound(_)
        ));
        assert!(matches!(
            classify(Kind::Ssh, "", e()),
            GitError::Protocol(_)
        ));
        assert!(matches!(
            classify(Kind::Ssh, "something odd", e()),
            GitError::Transport(m) if m.contains("something odd")
        ));
    }
}
