#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `make bench` part for the GitRepository fetch path (scripts/bench-source.sh runs it).
//!
//! Generates a repository with a few thousand files (about 30 MB, tunable with
//! `RFLUX_BENCH_FILES` and `RFLUX_BENCH_FILE_KIB`), pushes it to the e2e git server and serves it
//! over plain HTTP (`git http-backend`). Then, for `RFLUX_BENCH_RUNS` runs (default 5), times:
//!
//! - ours: the reconciler's path: connect + ls-refs + `fetch_commit`, `write_tree` into a temp
//!   dir, then `Storage::archive_async` (tar + gzip + digest into the storage);
//! - git: `git clone --depth 1` of the same URL, then `tar -c --exclude=.git . | gzip`.
//!
//! Prints medians as a markdown table with the ratio ours/git (goal <= 1.2x) and the packaging
//! throughput (work-tree MB per second of archiving). Nothing is asserted about timings.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rflux_e2e::GitServer;
use rflux_git::{Remote, Session};
use source_controller::artifact::{IgnoreRules, Storage, StorageOptions, git_artifact_file_name};
use source_controller::gitrepository::checkout::write_tree;
use source_controller::gitrepository::refs::RefSelector;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Deterministic, moderately compressible text (YAML-ish lines with pseudo-random tokens).
fn file_contents(seed: u64, bytes: usize) -> String {
    const WORDS: &[&str] = &[
        "apiVersion",
        "kind",
        "metadata",
        "name",
        "namespace",
        "labels",
        "spec",
        "replicas",
        "template",
        "containers",
        "image",
        "ports",
        "env",
        "value",
        "resources",
        "limits",
    ];
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut out = String::with_capacity(bytes + 64);
    while out.len() < bytes {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let word = WORDS[(state >> 33) as usize % WORDS.len()];
        let indent = ((state >> 40) % 4) as usize * 2;
        out.push_str(&" ".repeat(indent));
        out.push_str(word);
        out.push_str(": ");
        out.push_str(&format!("{:016x}\n", state ^ (state >> 17)));
    }
    out
}

fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let md = e.metadata().unwrap();
            if md.is_dir() {
                if e.file_name() != ".git" {
                    stack.push(e.path());
                }
            } else {
                total += md.len();
            }
        }
    }
    total
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn secs(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64())
}

struct OursRun {
    fetch_checkout: Duration,
    package: Duration,
    artifact_bytes: u64,
}

async fn ours(url: &str, storage: &Storage, run: usize) -> OursRun {
    let t0 = Instant::now();
    let remote = Remote::new(url);
    let selector = RefSelector::Branch("main".into());
    let mut session = Session::connect(&remote).await.unwrap();
    let prefixes = selector.prefixes();
    let prefix_refs: Vec<&str> = prefixes.iter().map(String::as_str).collect();
    let refs = session.ls_refs(&prefix_refs).await.unwrap();
    let resolved = selector.resolve(&refs).unwrap();
    let fetched = session.fetch_commit(&resolved.want).await;
    session.close().await;
    let fetched = fetched.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let dir2 = dir.clone();
    tokio::task::spawn_blocking(move || write_tree(&fetched, &dir2, &[]).map(|_| ()))
        .await
        .unwrap()
        .unwrap();
    let fetch_checkout = t0.elapsed();

    let t1 = Instant::now();
    let rules = IgnoreRules::load(&dir, None).unwrap();
    let revision = resolved.revision();
    let artifact = storage
        .new_artifact_for(
            "gitrepository",
            "bench",
            &format!("run{run}"),
            &revision,
            &git_artifact_file_name(&resolved.commit.to_hex()),
        )
        .unwrap();
    let artifact = storage.archive_async(artifact, dir, rules).await.unwrap();
    let package = t1.elapsed();
    OursRun {
        fetch_checkout,
        package,
        artifact_bytes: artifact.size,
    }
}

struct GitRun {
    clone: Duration,
    package: Duration,
    archive_bytes: u64,
}

fn git_baseline(url: &str, work: &Path, run: usize) -> GitRun {
    let dest = work.join(format!("clone{run}"));
    let t0 = Instant::now();
    let st = Command::new("git")
        .args(["clone", "-q", "--depth", "1", "--branch", "main", url])
        .arg(&dest)
        .env_remove("GIT_SSL_CAINFO")
        .status()
        .unwrap();
    assert!(st.success(), "git clone failed");
    let clone = t0.elapsed();
    let out = work.join(format!("clone{run}.tar.gz"));
    let t1 = Instant::now();
    let st = Command::new("sh")
        .arg("-c")
        .arg("tar -c --exclude=.git -C \"$1\" . | gzip > \"$2\"")
        .arg("sh")
        .arg(&dest)
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success(), "tar | gzip failed");
    let package = t1.elapsed();
    let archive_bytes = std::fs::metadata(&out).unwrap().len();
    GitRun {
        clone,
        package,
        archive_bytes,
    }
}

#[tokio::main]
async fn main() {
    let files = env_usize("RFLUX_BENCH_FILES", 3000);
    let file_kib = env_usize("RFLUX_BENCH_FILE_KIB", 10);
    let runs = env_usize("RFLUX_BENCH_RUNS", 5).max(1);

    let git = match GitServer::shared().await {
        Ok(g) => g,
        Err(e) => {
            println!("skipped: the e2e git server is not available: {e:#}");
            return;
        }
    };
    let repo = git.create_repo("bench-clone").unwrap();
    let t = Instant::now();
    for i in 0..files {
        let path = format!("dir{:02}/sub{:02}/file{i:05}.yaml", i % 40, (i / 40) % 10);
        repo.write(&path, &file_contents(i as u64, file_kib * 1024))
            .unwrap();
    }
    let head = repo.commit("bench tree").unwrap();
    repo.push("main").unwrap();
    let tree_bytes = dir_bytes(repo.path());
    eprintln!(
        "generated {files} files, {:.1} MB, commit {head}, in {:.1}s",
        tree_bytes as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    let url = git.http_url(repo.name());

    let storage_dir = tempfile::tempdir().unwrap();
    let storage = Storage::new(StorageOptions::new(storage_dir.path(), "localhost")).unwrap();
    let work = tempfile::tempdir().unwrap();

    // One warm-up of each (server-side pack caches, page cache), then the timed runs.
    ours(&url, &storage, 0).await;
    git_baseline(&url, work.path(), 0);
    let mut our_runs = Vec::new();
    let mut git_runs = Vec::new();
    for run in 1..=runs {
        our_runs.push(ours(&url, &storage, run).await);
        git_runs.push(git_baseline(&url, work.path(), run));
    }

    let o_fetch = median(our_runs.iter().map(|r| r.fetch_checkout).collect());
    let o_pkg = median(our_runs.iter().map(|r| r.package).collect());
    let o_total = median(
        our_runs
            .iter()
            .map(|r| r.fetch_checkout + r.package)
            .collect(),
    );
    let g_clone = median(git_runs.iter().map(|r| r.clone).collect());
    let g_pkg = median(git_runs.iter().map(|r| r.package).collect());
    let g_total = median(git_runs.iter().map(|r| r.clone + r.package).collect());
    let mb = tree_bytes as f64 / 1e6;
    let tput = |d: Duration| mb / d.as_secs_f64().max(1e-9);
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(1e-9);

    println!("## GitRepository fetch + package ({files} files, {mb:.1} MB tree, median of {runs})");
    println!();
    println!("| step | rflux (s) | git clone --depth 1 + tar\\|gzip (s) | ratio rflux/git |");
    println!("|---|---:|---:|---:|");
    println!(
        "| fetch + checkout | {} | {} | {:.2}x |",
        secs(o_fetch),
        secs(g_clone),
        ratio(o_fetch, g_clone)
    );
    println!(
        "| package (tar + gzip) | {} | {} | {:.2}x |",
        secs(o_pkg),
        secs(g_pkg),
        ratio(o_pkg, g_pkg)
    );
    println!(
        "| total | {} | {} | {:.2}x (goal <= 1.2x) |",
        secs(o_total),
        secs(g_total),
        ratio(o_total, g_total)
    );
    println!();
    println!("| packaging throughput | rflux | tar\\|gzip |");
    println!("|---|---:|---:|");
    println!(
        "| MB/s (work tree) | {:.1} | {:.1} |",
        tput(o_pkg),
        tput(g_pkg)
    );
    println!(
        "| archive size (MB) | {:.2} | {:.2} |",
        our_runs[0].artifact_bytes as f64 / 1e6,
        git_runs[0].archive_bytes as f64 / 1e6
    );
}
