//! Integration tests of the artifact module: deterministic archives, ignore rules, storage and
//! the file server.

#![allow(clippy::unwrap_used)]

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use source_controller::artifact::{
    Artifact, IgnoreRules, Storage, StorageOptions, package_dir, package_to_file,
};

fn write(root: &Path, rel: &str, content: &[u8], mode: u32) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(&p, content).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
}

fn set_mtime(p: &Path, t: SystemTime) {
    let f = fs::File::options().write(true).open(p).unwrap();
    f.set_modified(t).unwrap();
}

const LONG_DIR: &str =
    "this-is-a-rather-long-directory-name-to-force-the-ustar-prefix-field-to-be-used-by-the-writer";

/// The tree used for determinism tests; `reverse` creates entries in the opposite order,
/// `variant` changes modes and mtimes without changing content or the x bits.
fn build_tree(root: &Path, reverse: bool, variant: bool) {
    let (fm, xm) = if variant {
        (0o644, 0o755)
    } else {
        (0o600, 0o700)
    };
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let long_file = format!("{LONG_DIR}/{}.yaml", "f".repeat(60));
    let mut files: Vec<(String, Vec<u8>, u32)> = vec![
        (
            "kustomization.yaml".into(),
            b"resources:\n- deploy.yaml\n".to_vec(),
            fm,
        ),
        ("deploy.yaml".into(), b"kind: Deployment\n".to_vec(), fm),
        ("apps/a/config.yaml".into(), b"a: 1\n".to_vec(), fm),
        ("apps/b/config.yaml".into(), b"b: 2\n".to_vec(), fm),
        ("apps/B.yaml".into(), b"upper\n".to_vec(), fm),
        (
            "scripts/run.sh".into(),
            b"#!/bin/sh\necho hi\n".to_vec(),
            xm,
        ),
        ("empty.txt".into(), Vec::new(), fm),
        ("data/big.bin".into(), big, fm),
        ("unicodé/ñame.yaml".into(), b"x: y\n".to_vec(), fm),
        (long_file, b"long: true\n".to_vec(), fm),
        (format!("{}.yaml", "z".repeat(140)), b"z\n".to_vec(), fm),
        (".git/HEAD".into(), b"ref: refs/heads/main\n".to_vec(), fm),
        (".git/objects/ab/cdef".into(), b"blob".to_vec(), fm),
        (".gitignore".into(), b"*.tmp\n".to_vec(), fm),
    ];
    if reverse {
        files.reverse();
    }
    for (rel, content, mode) in &files {
        write(root, rel, content, *mode);
    }
    fs::create_dir_all(root.join("emptydir")).unwrap();
    symlink("deploy.yaml", root.join("link.yaml")).unwrap();
    symlink("/etc", root.join("etc-link")).unwrap();
    if variant {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_234_567_890);
        for (rel, _, _) in &files {
            set_mtime(&root.join(rel), t);
        }
        fs::set_permissions(root.join("apps"), fs::Permissions::from_mode(0o777)).unwrap();
    }
}

fn archive_bytes(dir: &Path, rules: &IgnoreRules) -> (Vec<u8>, String) {
    let mut out = Vec::new();
    let d = package_dir(dir, rules, &mut out).unwrap();
    assert_eq!(d.size, out.len() as u64);
    (out, d.to_string())
}

fn sha256_hex(b: &[u8]) -> String {
    // Independent check through the system tool when present, else skip the comparison.
    let tmp = tempfile::NamedTempFile::new().unwrap();
    fs::write(tmp.path(), b).unwrap();
    match Command::new("sha256sum").arg(tmp.path()).output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string(),
        _ => String::new(),
    }
}

struct Entry {
    path: String,
    kind: u8,
    mode: u32,
    uid: u64,
    gid: u64,
    mtime: u64,
    uname: Vec<u8>,
    data: Vec<u8>,
}

fn entries(targz: &[u8]) -> Vec<Entry> {
    let gz = flate2::read::GzDecoder::new(targz);
    let mut ar = tar::Archive::new(gz);
    let mut out = Vec::new();
    for e in ar.entries().unwrap() {
        let mut e = e.unwrap();
        let h = e.header().clone();
        let mut data = Vec::new();
        e.read_to_end(&mut data).unwrap();
        out.push(Entry {
            path: String::from_utf8(e.path_bytes().to_vec()).unwrap(),
            kind: h.entry_type().as_byte(),
            mode: h.mode().unwrap(),
            uid: h.uid().unwrap(),
            gid: h.gid().unwrap(),
            mtime: h.mtime().unwrap(),
            uname: h.username_bytes().unwrap_or_default().to_vec(),
            data,
        });
    }
    out
}

#[test]
fn same_tree_gives_identical_bytes() {
    let a = tempfile::tempdir().unwrap();
    build_tree(a.path(), false, false);
    let rules = IgnoreRules::load(a.path(), None).unwrap();
    let (b1, d1) = archive_bytes(a.path(), &rules);
    let (b2, d2) = archive_bytes(a.path(), &rules);
    assert_eq!(b1, b2);
    assert_eq!(d1, d2);
    let hex = sha256_hex(&b1);
    if !hex.is_empty() {
        assert_eq!(d1, format!("sha256:{hex}"));
    }

    // A copy created in the opposite order, with other mtimes and modes (same x bits).
    let b = tempfile::tempdir().unwrap();
    build_tree(b.path(), true, true);
    let rules_b = IgnoreRules::load(b.path(), None).unwrap();
    let (b3, d3) = archive_bytes(b.path(), &rules_b);
    assert_eq!(d1, d3);
    assert_eq!(b1, b3);

    // Changing one byte of content changes the digest.
    write(b.path(), "deploy.yaml", b"kind: Deployment!\n", 0o600);
    let (_, d4) = archive_bytes(b.path(), &rules_b);
    assert_ne!(d1, d4);
    // Adding the x bit changes the digest too (mode 0700 instead of 0600).
    write(a.path(), "deploy.yaml", b"kind: Deployment\n", 0o744);
    let (_, d5) = archive_bytes(a.path(), &rules);
    assert_ne!(d1, d5);
}

#[test]
fn bytes_do_not_depend_on_thread_count() {
    use source_controller::artifact::DigestAlgorithm;
    use source_controller::artifact::archive::package_dir_threads;
    let a = tempfile::tempdir().unwrap();
    build_tree(a.path(), false, false);
    // Several MiB so that the compressor really splits the stream into chunks.
    let noise: Vec<u8> = (0..5_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    write(a.path(), "data/noise.bin", &noise, 0o600);
    let rules = IgnoreRules::load(a.path(), None).unwrap();
    let mut outs = Vec::new();
    for threads in [1, 2, 4] {
        let mut out = Vec::new();
        let d = package_dir_threads(a.path(), &rules, DigestAlgorithm::Sha256, threads, &mut out)
            .unwrap();
        outs.push((out, d));
    }
    assert_eq!(outs[0], outs[1]);
    assert_eq!(outs[0], outs[2]);
    let es = entries(&outs[0].0);
    let n = es.iter().find(|e| e.path == "data/noise.bin").unwrap();
    assert_eq!(n.data, noise);
    // sha512 changes the digest string but not the bytes.
    let mut out = Vec::new();
    let d = package_dir_threads(a.path(), &rules, DigestAlgorithm::Sha512, 2, &mut out).unwrap();
    assert_eq!(out, outs[0].0);
    assert!(d.to_string().starts_with("sha512:") && d.digest.hex().len() == 128);
}

#[test]
fn layout_matches_flux() {
    let a = tempfile::tempdir().unwrap();
    build_tree(a.path(), false, false);
    let rules = IgnoreRules::load(a.path(), None).unwrap();
    let (bytes, _) = archive_bytes(a.path(), &rules);
    // gzip header: magic, deflate, no flags, mtime 0, OS unknown.
    assert_eq!(&bytes[..4], b"\x1f\x8b\x08\x00");
    assert_eq!(&bytes[4..8], &[0, 0, 0, 0]);
    assert_eq!(bytes[9], 255);
    let es = entries(&bytes);
    let names: Vec<&str> = es.iter().map(|e| e.path.as_str()).collect();
    let long_file = format!("{LONG_DIR}/{}.yaml", "f".repeat(60));
    let long_z = format!("{}.yaml", "z".repeat(140));
    let expected: Vec<&str> = vec![
        ".",
        "apps",
        "apps/B.yaml",
        "apps/a",
        "apps/a/config.yaml",
        "apps/b",
        "apps/b/config.yaml",
        "data",
        "data/big.bin",
        "deploy.yaml",
        "empty.txt",
        "emptydir",
        "kustomization.yaml",
        "scripts",
        "scripts/run.sh",
        LONG_DIR,
        &long_file,
        "unicodé",
        "unicodé/ñame.yaml",
        &long_z,
    ];
    assert_eq!(names, expected);
    for e in &es {
        assert_eq!((e.uid, e.gid, e.mtime), (0, 0, 0), "{}", e.path);
        assert!(e.uname.is_empty());
        assert!(!e.path.ends_with('/') && !e.path.starts_with("./"));
        match e.kind {
            b'5' => assert_eq!(e.mode, 0o750, "{}", e.path),
            b'0' => {
                let want = if e.path == "scripts/run.sh" {
                    0o700
                } else {
                    0o600
                };
                assert_eq!(e.mode, want, "{}", e.path);
            }
            k => panic!("unexpected entry type {k} for {}", e.path),
        }
    }
    let big = es.iter().find(|e| e.path == "data/big.bin").unwrap();
    assert_eq!(big.data.len(), 300_000);
    assert_eq!(big.data[1000], (1000 % 251) as u8);
    // The stream ends with exactly two zero blocks after the last entry's data.
    let mut tar_bytes = Vec::new();
    flate2::read::GzDecoder::new(&bytes[..])
        .read_to_end(&mut tar_bytes)
        .unwrap();
    assert_eq!(tar_bytes.len() % 512, 0);
    assert!(tar_bytes[tar_bytes.len() - 1024..].iter().all(|&b| b == 0));
    assert!(
        tar_bytes[tar_bytes.len() - 1536..tar_bytes.len() - 1024]
            .iter()
            .any(|&b| b != 0)
    );
}

#[test]
fn system_tar_unpacks_archive() {
    let a = tempfile::tempdir().unwrap();
    build_tree(a.path(), false, false);
    // Larger than several compression chunks, so the multi-chunk gzip stream is checked by
    // the system gzip too (CRC and length in the trailer).
    let noise: Vec<u8> = (0..3_500_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 9) as u8)
        .collect();
    write(a.path(), "data/noise.bin", &noise, 0o600);
    let out_dir = tempfile::tempdir().unwrap();
    let file = out_dir.path().join("artifact.tar.gz");
    let digest = package_to_file(a.path(), &file, None).unwrap();
    assert!(digest.starts_with("sha256:"));
    let extract = out_dir.path().join("x");
    fs::create_dir(&extract).unwrap();
    let status = match Command::new("tar")
        .arg("xzf")
        .arg(&file)
        .arg("-C")
        .arg(&extract)
        .status()
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("skipping: system tar not available: {e}");
            return;
        }
    };
    assert!(status.success());
    assert_eq!(
        fs::read(extract.join("apps/a/config.yaml")).unwrap(),
        b"a: 1\n"
    );
    assert_eq!(
        fs::read(extract.join("unicodé/ñame.yaml")).unwrap(),
        b"x: y\n"
    );
    let long_file = format!("{LONG_DIR}/{}.yaml", "f".repeat(60));
    assert_eq!(fs::read(extract.join(long_file)).unwrap(), b"long: true\n");
    assert_eq!(
        fs::read(extract.join(format!("{}.yaml", "z".repeat(140)))).unwrap(),
        b"z\n"
    );
    assert_eq!(
        fs::read(extract.join("data/big.bin")).unwrap().len(),
        300_000
    );
    assert_eq!(fs::read(extract.join("data/noise.bin")).unwrap(), noise);
    assert!(extract.join("emptydir").is_dir());
    let run = fs::metadata(extract.join("scripts/run.sh")).unwrap();
    assert_ne!(run.permissions().mode() & 0o100, 0);
    assert!(!extract.join(".git").exists());
    assert!(!extract.join(".gitignore").exists());
    assert!(fs::symlink_metadata(extract.join("link.yaml")).is_err());
    assert!(fs::symlink_metadata(extract.join("etc-link")).is_err());
    // The artifact file itself is 0600 and no temporary file is left behind.
    let md = fs::metadata(&file).unwrap();
    assert_eq!(md.permissions().mode() & 0o777, 0o600);
    let names: Vec<_> = fs::read_dir(out_dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

fn archived_names(dir: &Path, spec: Option<&str>) -> Vec<String> {
    let rules = IgnoreRules::load(dir, spec).unwrap();
    let (bytes, _) = archive_bytes(dir, &rules);
    entries(&bytes).into_iter().map(|e| e.path).collect()
}

#[test]
fn default_excludes_apply_without_user_patterns() {
    let a = tempfile::tempdir().unwrap();
    for f in [
        "app.yaml",
        "logo.png",
        "docs/pic.JPG",
        "docs/pic.jpg",
        "bundle.tar.gz",
        ".github/workflows/ci.yaml",
        ".travis.yml",
        "sub/.sops.yaml",
        ".flux.yaml",
        ".gitmodules",
        ".git/config",
    ] {
        write(a.path(), f, b"x", 0o644);
    }
    let names = archived_names(a.path(), None);
    assert_eq!(names, vec![".", "app.yaml", "docs", "docs/pic.JPG", "sub"]);

    // Any spec.ignore pattern disables the defaults (but never the VCS patterns).
    let names = archived_names(a.path(), Some("# only a comment\n/app.yaml\n"));
    assert!(!names.contains(&"app.yaml".to_string()));
    assert!(names.contains(&"logo.png".to_string()));
    assert!(names.contains(&".github/workflows/ci.yaml".to_string()));
    assert!(names.contains(&"sub/.sops.yaml".to_string()));
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with(".git/") || n == ".gitmodules")
    );

    // Comments and blank lines only: no user pattern, defaults stay.
    let names = archived_names(a.path(), Some("# c\n\n"));
    assert!(!names.contains(&"logo.png".to_string()));
}

#[test]
fn nested_sourceignore_is_scoped_and_spec_ignore_wins() {
    let a = tempfile::tempdir().unwrap();
    write(
        a.path(),
        ".sourceignore",
        b"*.md\n!keep.md\n/top-only.yaml\n",
        0o644,
    );
    write(a.path(), "README.md", b"x", 0o644);
    write(a.path(), "keep.md", b"x", 0o644);
    write(a.path(), "top-only.yaml", b"x", 0o644);
    write(a.path(), "deploy/top-only.yaml", b"x", 0o644);
    write(
        a.path(),
        "deploy/.sourceignore",
        b"secret.yaml\ntmp/\n",
        0o644,
    );
    write(a.path(), "deploy/secret.yaml", b"x", 0o644);
    write(a.path(), "deploy/tmp/x.yaml", b"x", 0o644);
    write(a.path(), "other/secret.yaml", b"x", 0o644);
    write(a.path(), "other/notes.md", b"x", 0o644);
    write(a.path(), "logo.png", b"x", 0o644);

    let names = archived_names(a.path(), None);
    assert_eq!(
        names,
        vec![
            ".",
            ".sourceignore",
            "deploy",
            "deploy/.sourceignore",
            "deploy/top-only.yaml",
            "keep.md",
            // .sourceignore patterns exist, so the default *.png exclusion is off.
            "logo.png",
            "other",
            "other/secret.yaml",
        ]
    );

    // spec.ignore comes last, so it can re-include and exclude.
    let names = archived_names(a.path(), Some("!deploy/secret.yaml\nother/\n"));
    assert!(names.contains(&"deploy/secret.yaml".to_string()));
    assert!(!names.iter().any(|n| n.starts_with("other")));
}

#[test]
fn missing_dir_is_a_typed_error() {
    let a = tempfile::tempdir().unwrap();
    let err = package_dir(
        &a.path().join("nope"),
        &IgnoreRules::none(),
        &mut Vec::new(),
    );
    assert!(matches!(
        err,
        Err(source_controller::artifact::ArtifactError::InvalidDir(_))
    ));
}

fn storage(root: &Path, ttl: Duration, records: usize) -> Storage {
    let mut o = StorageOptions::new(root, "source-controller.flux-system.svc.cluster.local.");
    o.retention_ttl = ttl;
    o.retention_records = records;
    Storage::new(o).unwrap()
}

#[test]
fn storage_archive_verify_and_remove() {
    let root = tempfile::tempdir().unwrap();
    let src = tempfile::tempdir().unwrap();
    build_tree(src.path(), false, false);
    let st = storage(root.path(), Duration::from_secs(60), 2);
    let rev = "main@sha1:0123456789abcdef0123456789abcdef01234567";
    let file = source_controller::artifact::git_artifact_file_name(rev);
    let mut art = st
        .new_artifact_for("GitRepository", "flux-system", "podinfo", rev, &file)
        .unwrap();
    assert_eq!(
        art.path,
        "gitrepository/flux-system/podinfo/0123456789abcdef0123456789abcdef01234567.tar.gz"
    );
    assert_eq!(
        art.url,
        "http://source-controller.flux-system.svc.cluster.local./gitrepository/flux-system/podinfo/0123456789abcdef0123456789abcdef01234567.tar.gz"
    );
    let rules = IgnoreRules::load(src.path(), None).unwrap();
    st.archive(&mut art, src.path(), &rules).unwrap();
    let local = st.local_path(&art.path).unwrap();
    assert!(st.artifact_exists(&art));
    assert_eq!(fs::metadata(&local).unwrap().len(), art.size);
    let dir_mode = fs::metadata(local.parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(dir_mode & 0o777, 0o700);
    st.verify_artifact(&art).unwrap();
    let (_, direct) = archive_bytes(src.path(), &rules);
    assert_eq!(art.digest, direct);
    assert!(!art.last_update_time.is_empty());

    // Corrupt the file: verification fails with a typed error.
    let mut f = fs::OpenOptions::new().append(true).open(&local).unwrap();
    f.write_all(b"junk").unwrap();
    assert!(matches!(
        st.verify_artifact(&art),
        Err(source_controller::artifact::ArtifactError::DigestMismatch { .. })
    ));

    // Paths that leave the root are refused.
    assert!(st.local_path("../x").is_err());
    assert!(st.local_path("gitrepository/../../x").is_err());
    // Neither are paths that name the root itself.
    assert!(st.local_path("").is_err());
    assert!(st.local_path("gitrepository/..").is_err());
    assert!(st.local_path("x\0y").is_err());

    assert!(
        st.remove_all("GitRepository", "flux-system", "podinfo")
            .unwrap()
    );
    assert!(!local.exists());
    assert!(
        !st.remove_all("GitRepository", "flux-system", "podinfo")
            .unwrap()
    );
}

fn touch(st: &Storage, name: &str, age: Duration) -> (Artifact, PathBuf) {
    let art = st
        .new_artifact_for(
            "GitRepository",
            "ns",
            "repo",
            name,
            &format!("{name}.tar.gz"),
        )
        .unwrap();
    st.mkdir_artifact(&art).unwrap();
    let p = st.local_path(&art.path).unwrap();
    fs::write(&p, name).unwrap();
    set_mtime(&p, SystemTime::now() - age);
    (art, p)
}

#[test]
fn garbage_collection_keeps_records_and_current() {
    let root = tempfile::tempdir().unwrap();
    let st = storage(root.path(), Duration::from_secs(3600), 2);
    let (_, p0) = touch(&st, "a0", Duration::from_secs(50));
    let (_, p1) = touch(&st, "a1", Duration::from_secs(40));
    let (_, p2) = touch(&st, "a2", Duration::from_secs(30));
    let (_, p3) = touch(&st, "a3", Duration::from_secs(20));
    let (cur, p4) = touch(&st, "a4", Duration::from_secs(10));
    let mut lock = p0.clone().into_os_string();
    lock.push(".lock");
    fs::write(&lock, b"").unwrap();
    let mut deleted = st.garbage_collect(&cur).unwrap();
    deleted.sort();
    assert_eq!(deleted, vec![p0.clone(), p1.clone(), p2.clone()]);
    assert!(!Path::new(&lock).exists());
    assert!(p3.exists() && p4.exists());
    // Running it again is a no-op.
    assert!(st.garbage_collect(&cur).unwrap().is_empty());

    // The current artifact survives even when it is the oldest and expired.
    let st = storage(root.path(), Duration::from_secs(5), 2);
    let (old_cur, pc) = touch(&st, "b0", Duration::from_secs(500));
    let deleted = st.garbage_collect(&old_cur).unwrap();
    assert!(pc.exists());
    assert_eq!(deleted.len(), 2, "{deleted:?}");
}

#[test]
fn garbage_collection_ttl_removes_below_record_count() {
    let root = tempfile::tempdir().unwrap();
    let st = storage(root.path(), Duration::from_secs(60), 10);
    let (_, old) = touch(&st, "old", Duration::from_secs(120));
    let (_, fresh) = touch(&st, "fresh", Duration::from_secs(1));
    let (cur, curp) = touch(&st, "cur", Duration::from_secs(0));
    let deleted = st.garbage_collect(&cur).unwrap();
    assert_eq!(deleted, vec![old.clone()]);
    assert!(fresh.exists() && curp.exists() && !old.exists());
}

/// The storage stage skips collecting while a collection left only the current artifact: the
/// `rest` flag says whether anything else (kept records, fresh files) is still there.
#[test]
fn garbage_collection_tells_whether_anything_is_left() {
    let root = tempfile::tempdir().unwrap();
    let st = storage(root.path(), Duration::from_secs(60), 10);
    let (_, fresh) = touch(&st, "fresh", Duration::from_secs(1));
    let (cur, _) = touch(&st, "cur", Duration::from_secs(0));
    let (deleted, rest) = st.garbage_collect_rest(&cur).unwrap();
    assert!(deleted.is_empty());
    assert!(rest, "a file within the TTL is kept for a later collection");
    fs::remove_file(&fresh).unwrap();
    let (deleted, rest) = st.garbage_collect_rest(&cur).unwrap();
    assert!(deleted.is_empty());
    assert!(!rest, "only the current artifact is left");
    // What is collected leaves nothing behind.
    let st = storage(root.path(), Duration::from_secs(5), 10);
    touch(&st, "old", Duration::from_secs(500));
    let (deleted, rest) = st.garbage_collect_rest(&cur).unwrap();
    assert_eq!(deleted.len(), 1);
    assert!(!rest);
}

#[tokio::test]
async fn async_wrappers_archive_and_collect() {
    let root = tempfile::tempdir().unwrap();
    let src = tempfile::tempdir().unwrap();
    write(src.path(), "app.yaml", b"kind: ConfigMap\n", 0o644);
    let st = storage(root.path(), Duration::from_secs(60), 1);
    let (_, older) = touch(&st, "older", Duration::from_secs(30));
    let art = st
        .new_artifact_for("GitRepository", "ns", "repo", "sha1:cafe", "cafe.tar.gz")
        .unwrap();
    let rules = IgnoreRules::load(src.path(), None).unwrap();
    let art = st
        .archive_async(art, src.path().to_path_buf(), rules)
        .await
        .unwrap();
    assert!(art.digest.starts_with("sha256:"));
    st.verify_artifact(&art).unwrap();
    let deleted = st.garbage_collect_async(&art).await.unwrap();
    assert_eq!(deleted, vec![older]);
    assert!(st.artifact_exists(&art));
}

#[test]
fn locks_are_exclusive_per_artifact() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let root = tempfile::tempdir().unwrap();
    let st = storage(root.path(), Duration::from_secs(60), 2);
    let a = st
        .new_artifact_for("GitRepository", "ns", "n", "r", "a.tar.gz")
        .unwrap();
    let b = st
        .new_artifact_for("GitRepository", "ns", "n", "r", "b.tar.gz")
        .unwrap();
    let g = st.lock(&a).unwrap();
    assert!(st.try_lock(&a).unwrap().is_none());
    assert!(st.try_lock(&b).unwrap().is_some());
    let released = Arc::new(AtomicBool::new(false));
    let (st2, a2, rel2) = (st.clone(), a.clone(), Arc::clone(&released));
    let h = std::thread::spawn(move || {
        let _g = st2.lock(&a2).unwrap();
        rel2.load(Ordering::SeqCst)
    });
    std::thread::sleep(Duration::from_millis(100));
    released.store(true, Ordering::SeqCst);
    drop(g);
    assert!(
        h.join().unwrap(),
        "second lock was acquired before the first was released"
    );
}

// ---------------------------------------------------------------------------------------------
// File server
// ---------------------------------------------------------------------------------------------

async fn raw_request(addr: std::net::SocketAddr, req: &str) -> (u16, String, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let split = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&buf[..split]).to_string();
    let body = buf[split + 4..].to_vec();
    let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_ascii_lowercase(), body)
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
}

#[tokio::test]
async fn file_server_serves_and_refuses_traversal() {
    let root = tempfile::tempdir().unwrap();
    let src = tempfile::tempdir().unwrap();
    build_tree(src.path(), false, false);
    let st = storage(root.path(), Duration::from_secs(60), 2);
    let mut art = st
        .new_artifact_for("GitRepository", "ns", "repo", "sha1:abc", "abc.tar.gz")
        .unwrap();
    st.archive(
        &mut art,
        src.path(),
        &IgnoreRules::load(src.path(), None).unwrap(),
    )
    .unwrap();
    let on_disk = fs::read(st.local_path(&art.path).unwrap()).unwrap();
    // A symlink inside the root that escapes it, and one that stays inside.
    symlink("/etc", root.path().join("escape")).unwrap();
    symlink("gitrepository", root.path().join("inside")).unwrap();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(source_controller::artifact::serve_listener(
        root.path().to_path_buf(),
        listener,
        async {
            let _ = rx.await;
        },
    ));

    let (status, head, body) = raw_request(addr, &get("/gitrepository/ns/repo/abc.tar.gz")).await;
    assert_eq!(status, 200);
    assert_eq!(body, on_disk);
    assert!(head.contains("content-type: application/x-gzip"), "{head}");
    assert!(head.contains(&format!("content-length: {}", on_disk.len())));
    assert!(head.contains("last-modified: "));
    assert!(head.contains("accept-ranges: bytes"));

    let head_req =
        "HEAD /gitrepository/ns/repo/abc.tar.gz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let (status, head, body) = raw_request(addr, head_req).await;
    assert_eq!(status, 200);
    assert!(body.is_empty());
    assert!(head.contains(&format!("content-length: {}", on_disk.len())));

    let range_req = "GET /gitrepository/ns/repo/abc.tar.gz HTTP/1.1\r\nHost: x\r\nRange: bytes=2-9\r\nConnection: close\r\n\r\n";
    let (status, head, body) = raw_request(addr, range_req).await;
    assert_eq!(status, 206);
    assert_eq!(body, on_disk[2..10].to_vec());
    assert!(head.contains(&format!("content-range: bytes 2-9/{}", on_disk.len())));

    for bad in [
        "/../etc/passwd",
        "/gitrepository/../../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/gitrepository/%2E%2E%2F%2E%2E%2Fetc/passwd",
        "/..%2f..%2fetc/passwd",
        "/gitrepository/ns/repo/abc.tar.gz%00",
        "/bad%zzescape",
    ] {
        let (status, _, body) = raw_request(addr, &get(bad)).await;
        assert!(status == 400 || status == 404, "{bad} -> {status}");
        assert!(!String::from_utf8_lossy(&body).contains("root:"), "{bad}");
    }
    let (status, _, _) = raw_request(addr, &get("/escape/passwd")).await;
    assert_eq!(status, 404);
    let (status, _, _) = raw_request(addr, &get("//etc/passwd")).await;
    assert_eq!(status, 404);
    let (status, _, body) = raw_request(addr, &get("/inside/ns/repo/abc.tar.gz")).await;
    assert_eq!(status, 200);
    assert_eq!(body, on_disk);
    let (status, _, _) = raw_request(addr, &get("/gitrepository/ns/repo/missing.tar.gz")).await;
    assert_eq!(status, 404);

    // The readiness probe path: a directory listing of the root.
    let (status, head, body) = raw_request(addr, &get("/")).await;
    assert_eq!(status, 200);
    assert!(head.contains("content-type: text/html; charset=utf-8"));
    assert!(
        String::from_utf8_lossy(&body).contains("<a href=\"gitrepository/\">gitrepository/</a>")
    );
    let (status, head, _) = raw_request(addr, &get("/gitrepository")).await;
    assert_eq!(status, 301);
    assert!(head.contains("location: gitrepository/"));

    let (status, _, _) = raw_request(
        addr,
        "POST /gitrepository/ns/repo/abc.tar.gz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 405);

    tx.send(()).unwrap();
    server.await.unwrap().unwrap();
}
