//! Times a shallow fetch + tree walk of a generated repository against
//! `git clone --depth 1` (+ `tar czf`). Usage:
//! `cargo run --release -p rflux-git --features bench --bin rflux-git-bench -- [files]`
//! (uses the local `git upload-pack` transport, so it needs git on PATH).

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use rflux_git::{ObjectId, Remote, SparseFilter, WalkEntry};

fn git(dir: &Path, args: &[&str]) -> Result<String, Box<dyn std::error::Error>> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()?;
    if !out.status.success() {
        return Err(format!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(String::from_utf8(out.stdout)?)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(5000);
    let dir = tempfile::tempdir()?;
    let work = dir.path().join("work");
    let bare = dir.path().join("repo.git");
    std::fs::create_dir_all(&work)?;
    git(&work, &["init", "-q", "-b", "main"])?;
    git(&work, &["config", "user.name", "b"])?;
    git(&work, &["config", "user.email", "b@x"])?;
    for i in 0..files {
        let d = work.join(format!("dir{:03}/sub{}", i / 100, i % 7));
        std::fs::create_dir_all(&d)?;
        let mut f = std::fs::File::create(d.join(format!("file{i}.yaml")))?;
        for j in 0..(20 + i % 60) {
            writeln!(
                f,
                "key{j}: value {i}-{j} some padding text to look like yaml"
            )?;
        }
    }
    git(&work, &["add", "-A"])?;
    git(&work, &["commit", "-q", "-m", "one"])?;
    let bare_s = bare.to_str().ok_or("non-UTF-8 temp path")?;
    git(
        dir.path(),
        &[
            "clone",
            "-q",
            "--bare",
            work.to_str().ok_or("path")?,
            bare_s,
        ],
    )?;
    // Pack the served repository like a real server's would be.
    git(&bare, &["repack", "-adq"])?;
    let head: ObjectId = git(&bare, &["rev-parse", "HEAD"])?.trim().parse()?;
    // Client-side decode cost alone: parse the same objects from a pack git made.
    let mut child = Command::new("git")
        .arg("-C")
        .arg(&bare)
        .args(["pack-objects", "--revs", "--stdout", "-q"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .ok_or("no stdin")?
        .write_all(format!("{head}\n").as_bytes())?;
    let pack = child.wait_with_output()?.stdout;
    let t = Instant::now();
    let (store, stats) = rflux_git::pack::parse_pack_stats(&pack, &rflux_git::Limits::default())?;
    println!(
        "decode only: {} byte pack, {} objects ({} ofs-deltas) in {:?}",
        pack.len(),
        store.len(),
        stats.ofs_deltas,
        t.elapsed()
    );
    let size = git(&bare, &["count-objects", "-vH"])?;
    println!("repo: {files} files; {}", size.replace('\n', "; "));

    for round in 0..3 {
        let remote = Remote::new(format!("file://{bare_s}"));
        let t = Instant::now();
        let fetched = rflux_git::fetch_commit(&remote, &head).await?;
        let t_fetch = t.elapsed();
        let mut n = 0usize;
        let mut bytes = 0usize;
        let mut gz = flate2::write::GzEncoder::new(std::io::sink(), flate2::Compression::default());
        fetched.walk_tree::<rflux_git::GitError, _>(&SparseFilter::all(), |e| {
            if let WalkEntry::File { data, .. } = e {
                n += 1;
                bytes += data.len();
                gz.write_all(data)
                    .map_err(|e| rflux_git::GitError::Transport(e.to_string()))?;
            }
            Ok(())
        })?;
        gz.finish()?;
        let t_total = t.elapsed();

        let out = dir.path().join(format!("clone{round}"));
        let t = Instant::now();
        git(
            dir.path(),
            &[
                "clone",
                "-q",
                "--depth",
                "1",
                &format!("file://{bare_s}"),
                out.to_str().ok_or("path")?,
            ],
        )?;
        let t_clone = t.elapsed();
        let tgz = dir.path().join(format!("clone{round}.tgz"));
        let st = Command::new("tar")
            .arg("czf")
            .arg(&tgz)
            .arg("--exclude=.git")
            .arg("-C")
            .arg(&out)
            .arg(".")
            .status()?;
        if !st.success() {
            return Err("tar failed".into());
        }
        let t_clone_tar = t.elapsed();
        println!(
            "round {round}: rflux-git fetch {:?}, fetch+walk+gzip {:?} ({n} files, {bytes} bytes) | git clone --depth 1 {:?}, clone+tar czf {:?}",
            t_fetch, t_total, t_clone, t_clone_tar
        );
    }
    Ok(())
}
