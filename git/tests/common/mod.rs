//! Helpers shared by the integration tests: git CLI wrappers and the
//! reference listing (`git ls-tree -r` + blob contents) walks are compared to.

#![allow(dead_code, clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

use rflux_git::{FetchedCommit, GitError, SparseFilter, WalkEntry};

pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

pub fn git_bytes(dir: &Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success());
    out.stdout
}

/// One line of the reference listing: mode, path, object id, and blob bytes
/// (empty for gitlinks).
pub type Listing = Vec<(u32, String, String, Vec<u8>)>;

/// What git says the tree of `rev` holds, in `git ls-tree -r` order.
pub fn git_listing(repo: &Path, rev: &str, under: &[&str]) -> Listing {
    let out = git_bytes(repo, &["ls-tree", "-r", "-z", "--full-tree", rev]);
    let mut v = Vec::new();
    for rec in out.split(|&b| b == 0).filter(|r| !r.is_empty()) {
        let rec = std::str::from_utf8(rec).unwrap();
        let (meta, path) = rec.split_once('\t').unwrap();
        let mut m = meta.split(' ');
        let mode = u32::from_str_radix(m.next().unwrap(), 8).unwrap();
        let ty = m.next().unwrap();
        let oid = m.next().unwrap().to_string();
        if !under.is_empty()
            && !under
                .iter()
                .any(|u| path.starts_with(&format!("{}/", u.trim_matches('/'))))
        {
            continue;
        }
        let data = if ty == "blob" {
            git_bytes(repo, &["cat-file", "blob", &oid])
        } else {
            Vec::new()
        };
        v.push((mode, path.to_string(), oid, data));
    }
    v
}

/// The same listing produced by walking a fetched commit.
pub fn walk_listing(f: &FetchedCommit, filter: &SparseFilter) -> Listing {
    let mut v = Vec::new();
    f.walk_tree::<GitError, _>(filter, |e| {
        match e {
            WalkEntry::File {
                path,
                mode,
                oid,
                data,
            } => v.push((mode, path.to_string(), oid.to_hex(), data.to_vec())),
            WalkEntry::Submodule { path, oid } => {
                v.push((0o160000, path.to_string(), oid.to_hex(), Vec::new()))
            }
        }
        Ok(())
    })
    .unwrap();
    v
}

/// Fills the work tree `work` with a varied tree (nested dirs, executable,
/// symlink, empty file, binary, a gitlink) and commits it twice; returns the
/// last commit id.
pub fn populate(work: &Path) -> String {
    git(work, &["config", "user.name", "T"]);
    git(work, &["config", "user.email", "t@example.com"]);
    git(work, &["config", "commit.gpgsign", "false"]);
    let w = |p: &str, c: &[u8]| {
        let full = work.join(p);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, c).unwrap();
    };
    let long: String = (0..300).map(|i| format!("key{i}: value {i}\n")).collect();
    w("README.md", b"# test\n");
    w("apps/base/deploy.yaml", long.as_bytes());
    w("apps/prod/kustomization.yaml", b"resources:\n- ../base\n");
    w("apps/prod/deep/er/file.txt", b"deep\n");
    w("a-b/x", b"sorts before a/ in git order\n");
    w("a.txt", b"");
    w("bin/run.sh", b"#!/bin/sh\necho hi\n");
    w(
        "blob.bin",
        &(0u8..=255).cycle().take(5000).collect::<Vec<_>>(),
    );
    git(work, &["add", "-A"]);
    git(work, &["update-index", "--chmod=+x", "bin/run.sh"]);
    std::os::unix::fs::symlink("apps/base/deploy.yaml", work.join("link")).unwrap();
    git(work, &["add", "link"]);
    git(
        work,
        &[
            "update-index",
            "--add",
            "--cacheinfo",
            "160000,1234567890123456789012345678901234567890,vendor/sub",
        ],
    );
    git(work, &["commit", "-q", "-m", "first"]);
    w(
        "apps/base/deploy.yaml",
        long.replace("value 150", "changed").as_bytes(),
    );
    git(work, &["commit", "-q", "-am", "second"]);
    git(work, &["rev-parse", "HEAD"]).trim().to_string()
}

/// Set in the environment of a test binary that [`isolated`] started.
const ISOLATED_ENV: &str = "RFLUX_GIT_ISOLATED_TEST";

/// How long the body of an [`isolated`] test may run.
pub const ISOLATED_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

/// Runs `body` in a fresh copy of the current test binary that runs only the test `name`,
/// with `env` added to its environment and, when `max_mib` is set, its address space capped
/// at that many MiB (`ulimit -v`): an allocation beyond the cap aborts the copy, which fails
/// the test instead of exhausting the machine's memory. The copy also fails when `body`
/// runs longer than [`ISOLATED_DEADLINE`].
pub fn isolated(
    name: &str,
    env: &[(&str, &std::ffi::OsStr)],
    max_mib: Option<u64>,
    body: impl FnOnce(),
) {
    if std::env::var_os(ISOLATED_ENV).is_some() {
        let started = std::time::Instant::now();
        let test = name.to_string();
        std::thread::spawn(move || {
            std::thread::sleep(ISOLATED_DEADLINE);
            eprintln!("{test}: still running after {ISOLATED_DEADLINE:?}");
            std::process::exit(3);
        });
        body();
        let peak = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmPeak:"))
                    .map(str::to_string)
            })
            .unwrap_or_default();
        eprintln!("{name}: done in {:?}; {peak}", started.elapsed());
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let limit = max_mib.map_or("unlimited".to_string(), |m| (m * 1024).to_string());
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("ulimit -v {limit} && exec \"$0\" \"$@\""))
        .arg(exe)
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .env(ISOLATED_ENV, "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stderr}");
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "isolated run of {name} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}
