//! `untar`: kustomize-controller's artifact extraction (`fetch::untar`).
//!
//! Property: no panic, and nothing is written outside the target directory: after the
//! extraction the jail around it holds only the target and an untouched canary, and the
//! target holds only directories and regular files (symlinks are skipped).

use std::fs;
use std::io::Write;
use std::path::Path;

use crate::controller::untar::{UntarLimits, untar as extract};
use flate2::Compression;
use flate2::write::GzEncoder;

const CANARY: &[u8] = b"canary";

/// First byte even: the rest is a tar stream, gzipped here so the fuzzer works on tar
/// headers; odd: the rest is the raw gzip stream.
pub fn untar(data: &[u8]) {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let gz = if mode % 2 == 0 {
        let mut enc = GzEncoder::new(Vec::new(), Compression::fast());
        if enc.write_all(body).is_err() {
            return;
        }
        match enc.finish() {
            Ok(v) => v,
            Err(_) => return,
        }
    } else {
        body.to_vec()
    };
    let Ok(jail) = tempfile::tempdir() else {
        panic!("cannot create a temporary directory");
    };
    let dest = jail.path().join("out");
    let canary = jail.path().join("canary");
    if fs::create_dir(&dest).is_err() || fs::write(&canary, CANARY).is_err() {
        panic!("cannot prepare the jail");
    }
    let limits = UntarLimits {
        max_bytes: Some(1 << 20),
        max_entries: Some(1_000),
    };
    let res = extract(&gz[..], &dest, &limits);
    let mut names: Vec<_> = fs::read_dir(jail.path())
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    names.sort();
    assert_eq!(
        names,
        ["canary", "out"],
        "extraction wrote beside the target ({res:?})"
    );
    assert_eq!(
        fs::read(&canary).ok().as_deref(),
        Some(CANARY),
        "canary changed"
    );
    let meta = fs::symlink_metadata(&dest).ok();
    assert!(
        meta.is_some_and(|m| m.is_dir()),
        "the target is no longer a directory"
    );
    check_tree(&dest);
    if let Ok(stats) = res {
        assert!(
            stats.bytes <= 1 << 20,
            "wrote {} bytes over the limit",
            stats.bytes
        );
    }
}

fn check_tree(dir: &Path) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.filter_map(|e| e.ok()) {
        let p = e.path();
        let Ok(m) = fs::symlink_metadata(&p) else {
            continue;
        };
        let t = m.file_type();
        assert!(!t.is_symlink(), "a symlink was extracted: {}", p.display());
        if t.is_dir() {
            check_tree(&p);
        } else {
            assert!(t.is_file(), "not a regular file: {}", p.display());
        }
    }
}
