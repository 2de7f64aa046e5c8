//! The real `sops` and `age-keygen` CLIs (built from the Go module proxy by
//! `e2e/sops/build.sh`, or on PATH) make every encrypted fixture at test time: nothing
//! encrypted is committed.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where `e2e/sops/build.sh` puts the binaries.
fn cache_bin(name: &str) -> PathBuf {
    let dir = std::env::var_os("RFLUX_SOPS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/gitops-e2e/sops-bin")
        });
    dir.join(name)
}

/// The path of a tool: the cache first, then PATH.
pub fn tool(name: &str) -> Option<PathBuf> {
    let c = cache_bin(name);
    if c.is_file() {
        return Some(c);
    }
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|f| f.is_file())
    })
}

/// The real tools, or `None` after saying why the test is skipped. In CI (`CI` set) a missing
/// tool is a failure: `.ci/run` builds them.
pub fn tools() -> Option<Tools> {
    match (tool("sops"), tool("age-keygen")) {
        (Some(sops), Some(age_keygen)) => Some(Tools { sops, age_keygen }),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "sops/age-keygen missing in CI: run e2e/sops/build.sh"
            );
            eprintln!(
                "skipped: the real sops and age-keygen are not built (run e2e/sops/build.sh)"
            );
            None
        }
    }
}

pub struct Tools {
    pub sops: PathBuf,
    pub age_keygen: PathBuf,
}

/// An age identity made by `age-keygen`.
pub struct AgeKey {
    /// The whole key file (comments and the `AGE-SECRET-KEY-1…` line).
    pub identity: String,
    /// `age1…`
    pub recipient: String,
}

/// A passphrase-less OpenPGP key made by `gpg` in a GnuPG home of its own (removed, and its
/// agent stopped, on drop).
pub struct PgpKey {
    /// The GnuPG home that holds it (set `GNUPGHOME` to it for `sops encrypt --pgp`).
    pub home: PathBuf,
    /// 40 hex digits.
    pub fingerprint: String,
    /// `gpg --export-secret-keys --armor`: what a Flux decryption Secret holds as `*.asc`.
    pub armored_secret: String,
    _dir: tempfile::TempDir,
}

impl PgpKey {
    /// `home` as text, for an environment list.
    pub fn home_str(&self) -> &str {
        self.home.to_str().unwrap()
    }
}

impl Drop for PgpKey {
    fn drop(&mut self) {
        let _ = Command::new("gpgconf")
            .env("GNUPGHOME", &self.home)
            .args(["--kill", "gpg-agent"])
            .output();
    }
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A fresh OpenPGP key of gpg's `default` algorithm (`None` when gpg is absent, which CI
/// refuses).
pub fn pgp_key() -> Option<PgpKey> {
    pgp_key_with("default")
}

/// A fresh OpenPGP key; `algo` as for `gpg --quick-gen-key` (`default`, `future-default`, …).
pub fn pgp_key_with(algo: &str) -> Option<PgpKey> {
    let Some(gpg) = tool("gpg") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "gpg missing in CI: make deps installs it"
        );
        eprintln!("skipped: gpg is not installed");
        return None;
    };
    let dir = tempfile::Builder::new().prefix("gpg").tempdir().unwrap();
    let home = dir.path().to_path_buf();
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let run = |args: &[&str]| {
        let out = Command::new(&gpg)
            .env("GNUPGHOME", &home)
            .args(["--batch", "--quiet", "--no-tty"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "gpg {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    run(&[
        "--passphrase",
        "",
        "--quick-gen-key",
        &format!("rflux test {n} <t{n}@example.invalid>"),
        algo,
        "default",
        "never",
    ]);
    let listing = run(&["--list-secret-keys", "--with-colons"]);
    let fingerprint = listing
        .lines()
        .find_map(|l| l.strip_prefix("fpr:"))
        .and_then(|l| l.split(':').nth(8))
        .expect("fingerprint")
        .to_string();
    let armored_secret = run(&["--export-secret-keys", "--armor", &fingerprint]);
    Some(PgpKey {
        home,
        fingerprint,
        armored_secret,
        _dir: dir,
    })
}

impl Tools {
    /// A fresh age identity, made by `age-keygen` in `dir`.
    pub fn age_key(&self, dir: &Path) -> AgeKey {
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let f = dir.join(format!("age-key-{n}.txt"));
        let out = Command::new(&self.age_keygen)
            .arg("-o")
            .arg(&f)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "age-keygen: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let identity = std::fs::read_to_string(&f).unwrap();
        let recipient = identity
            .lines()
            .find_map(|l| l.strip_prefix("# public key: "))
            .expect("public key line")
            .trim()
            .to_string();
        AgeKey {
            identity,
            recipient,
        }
    }

    /// `sops <args>` in `dir` with extra environment (no age key from this machine's
    /// environment): stdout, or the exit status and stderr.
    pub fn run(&self, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<Vec<u8>, String> {
        let mut cmd = Command::new(&self.sops);
        cmd.current_dir(dir)
            .env("SOPS_DISABLE_VERSION_CHECK", "1")
            .env_remove("SOPS_AGE_KEY")
            .env_remove("SOPS_AGE_KEY_FILE")
            .args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        if out.status.success() {
            Ok(out.stdout)
        } else {
            Err(format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// `sops encrypt <args> <file>` run in `dir` (where no `.sops.yaml` applies, unless the
    /// test wrote one): the encrypted bytes.
    pub fn encrypt(&self, dir: &Path, file: &str, args: &[&str]) -> Vec<u8> {
        self.encrypt_with(dir, file, args, None)
    }

    /// [`Tools::encrypt`] with `GNUPGHOME` set to `gnupg_home` (for `--pgp`).
    pub fn encrypt_with(
        &self,
        dir: &Path,
        file: &str,
        args: &[&str],
        gnupg_home: Option<&Path>,
    ) -> Vec<u8> {
        let mut argv = vec!["encrypt"];
        argv.extend_from_slice(args);
        argv.push(file);
        let home = gnupg_home.map(|h| h.to_str().unwrap());
        let env: Vec<(&str, &str)> = home.map(|h| ("GNUPGHOME", h)).into_iter().collect();
        self.run(dir, &argv, &env)
            .unwrap_or_else(|e| panic!("sops encrypt: {e}"))
    }

    /// `sops decrypt <args> <file>` with the age identity in `SOPS_AGE_KEY`: the reference
    /// plaintext (exit status and stderr on failure).
    pub fn decrypt(
        &self,
        dir: &Path,
        file: &str,
        age_identity: &str,
        args: &[&str],
    ) -> Result<Vec<u8>, String> {
        let mut argv = vec!["decrypt"];
        argv.extend_from_slice(args);
        argv.push(file);
        self.run(dir, &argv, &[("SOPS_AGE_KEY", age_identity)])
    }
}
