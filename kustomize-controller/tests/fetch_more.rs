//! Artifact fetcher, continued from `fetch.rs`: unpacking hand-made tarballs (path traversal,
//! symlinks, entry count and size limits, hard links and devices, modes and mtimes, corrupt
//! archives), and working copies (removed with their value, and at start-up when a killed
//! process left them). The servers and helpers shared with `fetch.rs` are in
//! `fetch_common/mod.rs`.
#![allow(clippy::unwrap_used)]

mod fetch_common;

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fetch_common::*;
use kustomize_controller::fetch::{
    ArtifactFetcher, FetcherOptions, RUN_DIR_PREFIX, UntarError, UntarLimits, untar,
};

fn untar_bytes(bytes: &[u8], limits: &UntarLimits) -> (tempfile::TempDir, Result<(), UntarError>) {
    let dest = tempfile::tempdir().unwrap();
    let r = untar(bytes, dest.path(), limits).map(|_| ());
    (dest, r)
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[test]
fn traversal_and_absolute_names_are_refused() {
    for name in ["../x", "a/../../x", "/abs/path", "a\\b", "a/.."] {
        let (dest, r) = untar_bytes(&tgz(&[file(name, "x")]), &UntarLimits::default());
        match r {
            Err(UntarError::InvalidName(n)) => assert_eq!(n, name),
            other => panic!("{name}: unexpected {other:?}"),
        }
        assert!(
            fs::read_dir(dest.path()).unwrap().next().is_none(),
            "{name}"
        );
    }
}

#[test]
fn symlinks_are_skipped_and_never_followed() {
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("secret");
    let bytes = tgz(&[
        raw_entry(
            b"link",
            b'2',
            0o777,
            b"",
            target.to_str().unwrap().as_bytes(),
            0,
        ),
        raw_entry(b"up", b'2', 0o777, b"", b"../../..", 0),
        // A file written "through" the symlink name must land inside dest as a plain file.
        file("link", "inside"),
        file("kept.yaml", "k: v\n"),
    ]);
    let (dest, r) = untar_bytes(&bytes, &UntarLimits::default());
    r.unwrap();
    assert!(!target.exists());
    let link = dest.path().join("link");
    assert!(
        !fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(fs::read_to_string(link).unwrap(), "inside");
    assert!(fs::symlink_metadata(dest.path().join("up")).is_err());
    assert_eq!(
        fs::read_to_string(dest.path().join("kept.yaml")).unwrap(),
        "k: v\n"
    );
}

#[test]
fn entry_count_and_size_limits_are_enforced() {
    let many: Vec<Vec<u8>> = (0..50).map(|i| file(&format!("f{i}"), "")).collect();
    let limits = UntarLimits {
        max_bytes: None,
        max_entries: Some(10),
    };
    let (_d, r) = untar_bytes(&tgz(&many), &limits);
    assert!(
        matches!(r, Err(UntarError::TooManyEntries { limit: 10 })),
        "{r:?}"
    );

    let limits = UntarLimits {
        max_bytes: Some(100),
        max_entries: None,
    };
    let big = "x".repeat(80);
    let (_d, r) = untar_bytes(&tgz(&[file("a", &big), file("b", &big)]), &limits);
    match r {
        Err(UntarError::TooBig { name, limit }) => {
            assert_eq!((name.as_str(), limit), ("b", 100));
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn hard_links_and_devices_are_unsupported() {
    for (flag, name) in [(b'1', "hard"), (b'3', "chardev"), (b'6', "fifo")] {
        let (_d, r) = untar_bytes(
            &tgz(&[raw_entry(
                name.as_bytes(),
                flag,
                0o644,
                b"",
                b"/etc/passwd",
                0,
            )]),
            &UntarLimits::default(),
        );
        assert!(
            matches!(r, Err(UntarError::Unsupported { name: ref n, .. }) if n == name),
            "{name}: {r:?}"
        );
    }
}

#[test]
fn directory_modes_are_at_least_0700_and_mtimes_are_clamped() {
    let future = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 10 * 365 * 24 * 3600;
    let bytes = tgz(&[
        raw_entry(b"ro/", b'5', 0o500, b"", b"", 0),
        raw_entry(b"ro/f.txt", b'0', 0o400, b"data", b"", future),
        raw_entry(b"old.txt", b'0', 0o644, b"old", b"", 1_000_000_000),
    ]);
    let (dest, r) = untar_bytes(&bytes, &UntarLimits::default());
    r.unwrap();
    let m = fs::metadata(dest.path().join("ro"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(m & 0o777, 0o700, "{m:o}");
    let f = fs::metadata(dest.path().join("ro/f.txt")).unwrap();
    assert!(f.modified().unwrap() <= SystemTime::now());
    assert_eq!(f.permissions().mode() & 0o600, 0o600);
    let old = fs::metadata(dest.path().join("old.txt")).unwrap();
    assert_eq!(
        old.modified().unwrap(),
        UNIX_EPOCH + Duration::from_secs(1_000_000_000)
    );
}

#[test]
fn truncated_and_corrupt_archives_are_errors() {
    let mut bytes = tgz(&[file("a", &"x".repeat(4000))]);
    bytes.truncate(bytes.len() / 2);
    let (_d, r) = untar_bytes(&bytes, &UntarLimits::default());
    assert!(r.is_err());
    let (_d, r) = untar_bytes(b"not gzip at all", &UntarLimits::default());
    assert!(matches!(r, Err(UntarError::Format(_))), "{r:?}");
}

// ---------------------------------------------------------------------------------------------
// Working copies
// ---------------------------------------------------------------------------------------------

fn work_opts(cache: &Path, parent: &Path) -> FetcherOptions {
    let mut o = fast_opts(cache);
    o.work_parent = parent.to_path_buf();
    o
}

#[tokio::test]
async fn fetch_to_work_dir_gives_a_copy_that_goes_with_its_value() {
    let storage = tempfile::tempdir().unwrap();
    let rel = "gitrepository/default/app/w.tar.gz";
    let digest = make_artifact(storage.path(), rel, "work");
    let server = artifact_server(storage.path()).await;
    let cache = tempfile::tempdir().unwrap();
    let parent = tempfile::tempdir().unwrap();
    // The parent is made when missing.
    let work_parent = parent.path().join("tmp");
    let f = ArtifactFetcher::new(work_opts(cache.path(), &work_parent)).unwrap();
    let url = format!("{}/{rel}", server.base);
    let a = f.fetch_to_work_dir(&url, &digest).await.unwrap();
    let b = f.fetch_to_work_dir(&url, &digest).await.unwrap();
    assert_ne!(a.path(), b.path());
    assert_eq!(
        fs::read_to_string(a.path().join("deploy/nested/deeper/x.txt")).unwrap(),
        "work"
    );
    // Both in the fetcher's one run directory, named for the sweep.
    let run = a.path().parent().unwrap().to_path_buf();
    assert_eq!(b.path().parent(), Some(run.as_path()));
    assert_eq!(run.parent(), Some(work_parent.as_path()));
    let run_name = run.file_name().unwrap().to_string_lossy().into_owned();
    assert!(run_name.starts_with(RUN_DIR_PREFIX), "{run_name}");
    let a_path = a.path().to_path_buf();
    drop(a);
    assert!(!a_path.exists());
    assert!(b.path().is_dir());
    drop(b);
    drop(f);
    assert!(!run.exists(), "the run directory goes with its fetcher");
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);
}

#[test]
fn start_up_removes_working_copies_of_ended_runs_only() {
    let parent = tempfile::tempdir().unwrap();
    let p = parent.path();
    let cache = tempfile::tempdir().unwrap();

    // A live run: its copy survives another fetcher's start-up.
    let live = ArtifactFetcher::new(work_opts(cache.path(), p)).unwrap();
    let live_copy = live.work_dir().unwrap();
    fs::write(live_copy.path().join("kustomization.yaml"), "x").unwrap();
    let live_run = live_copy.path().parent().unwrap().to_path_buf();

    // Runs that ended mid-reconcile: their lock file is there but nobody holds it.
    let dead = p.join(format!("{RUN_DIR_PREFIX}dead"));
    fs::create_dir_all(dead.join("reconcile-1/deploy")).unwrap();
    fs::write(dead.join(".lock"), "").unwrap();
    fs::write(dead.join("reconcile-1/deploy/cm.yaml"), "x").unwrap();
    fs::set_permissions(
        dead.join("reconcile-1/deploy"),
        fs::Permissions::from_mode(0o500),
    )
    .unwrap();
    let dead_empty = p.join(format!("{RUN_DIR_PREFIX}dead-empty"));
    fs::create_dir(&dead_empty).unwrap();
    fs::write(dead_empty.join(".lock"), "").unwrap();
    // One that died before making its lock file, long ago.
    let lockless_old = p.join(format!("{RUN_DIR_PREFIX}old"));
    fs::create_dir(&lockless_old).unwrap();
    fs::File::open(&lockless_old)
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(7200))
        .unwrap();

    // Left alone: a run dir being created (no lock file yet), other names, a file and a
    // symlink with our prefix.
    let lockless_new = p.join(format!("{RUN_DIR_PREFIX}new"));
    fs::create_dir(&lockless_new).unwrap();
    let foreign = p.join("other-tool-work");
    fs::create_dir(&foreign).unwrap();
    fs::write(foreign.join(".lock"), "").unwrap();
    let near_miss = p.join("kustomize-controller-workdir");
    fs::create_dir(&near_miss).unwrap();
    fs::write(near_miss.join(".lock"), "").unwrap();
    let file = p.join(format!("{RUN_DIR_PREFIX}file"));
    fs::write(&file, "not a directory").unwrap();
    let target = p.join("elsewhere");
    fs::create_dir(&target).unwrap();
    fs::write(target.join(".lock"), "").unwrap();
    let link = p.join(format!("{RUN_DIR_PREFIX}link"));
    std::os::unix::fs::symlink(&target, &link).unwrap();

    let _restarted = ArtifactFetcher::new(work_opts(cache.path(), p)).unwrap();

    assert!(!dead.exists());
    assert!(!dead_empty.exists());
    assert!(!lockless_old.exists());
    assert!(live_copy.path().join("kustomization.yaml").is_file());
    assert!(live_run.join(".lock").is_file());
    assert!(lockless_new.is_dir());
    assert!(foreign.join(".lock").is_file());
    assert!(near_miss.join(".lock").is_file());
    assert!(file.is_file());
    assert!(target.join(".lock").is_file());
    assert!(
        fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

/// Set in the child process of [`a_killed_run_is_swept_at_the_next_start_up`].
const CHILD_ENV: &str = "RFLUX_FETCH_TEST_WORK_PARENT";

#[test]
fn a_killed_run_is_swept_at_the_next_start_up() {
    if let Some(parent) = std::env::var_os(CHILD_ENV) {
        // The child: a reconcile's working copy, then wait to be killed (SIGKILL: no drop).
        let cache = tempfile::tempdir().unwrap();
        let f = ArtifactFetcher::new(work_opts(cache.path(), Path::new(&parent))).unwrap();
        let copy = f.work_dir().unwrap();
        fs::write(copy.path().join("kustomization.yaml"), "x").unwrap();
        // On a line of its own (libtest has written the test's name without a newline).
        println!("\nWORK {}", copy.path().display());
        std::io::stdout().flush().unwrap();
        std::thread::sleep(Duration::from_secs(120));
        return;
    }
    let parent = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_killed_run_is_swept_at_the_next_start_up",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, parent.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let copy = std::io::BufRead::lines(std::io::BufReader::new(stdout))
        .map(Result::unwrap)
        .find_map(|l| {
            l.split_once("WORK ")
                .map(|(_, p)| std::path::PathBuf::from(p))
        })
        .expect("the child reports its working copy");
    let run = copy.parent().unwrap().to_path_buf();
    assert!(copy.join("kustomization.yaml").is_file());

    // While the child lives, a start-up leaves its copy alone.
    let cache = tempfile::tempdir().unwrap();
    ArtifactFetcher::new(work_opts(cache.path(), parent.path())).unwrap();
    assert!(copy.join("kustomization.yaml").is_file());

    child.kill().unwrap();
    child.wait().unwrap();
    // Killed mid-reconcile: the copy is still there, until the next start-up.
    assert!(copy.is_dir());
    ArtifactFetcher::new(work_opts(cache.path(), parent.path())).unwrap();
    assert!(!run.exists(), "{} left behind", run.display());
    assert_eq!(fs::read_dir(parent.path()).unwrap().count(), 0);
}
