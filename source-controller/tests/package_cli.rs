//! `source-controller package <dir> -o <file> [--ignore <patterns>]`.
#![allow(clippy::unwrap_used)]

use std::fs;
use std::process::Command;

use source_controller::artifact::{Digest, DigestAlgorithm};

fn run(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_source-controller"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn package_prints_the_digest_of_the_written_file() {
    let src = tempfile::tempdir().unwrap();
    fs::create_dir_all(src.path().join("deploy")).unwrap();
    fs::write(src.path().join("deploy/cm.yaml"), "a: 1\n").unwrap();
    fs::write(src.path().join("notes.md"), "n\n").unwrap();
    let out = tempfile::tempdir().unwrap();
    let all = out.path().join("all.tar.gz");
    let o = run(&[
        "package",
        src.path().to_str().unwrap(),
        "-o",
        all.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let printed = String::from_utf8(o.stdout).unwrap().trim().to_string();
    let actual = Digest::of_reader(DigestAlgorithm::Sha256, &mut fs::File::open(&all).unwrap())
        .unwrap()
        .to_string();
    assert_eq!(printed, actual);
    assert!(printed.starts_with("sha256:"));

    // --ignore changes the content, hence the digest.
    let filtered = out.path().join("filtered.tar.gz");
    let o = run(&[
        "package",
        src.path().to_str().unwrap(),
        "-o",
        filtered.to_str().unwrap(),
        "--ignore",
        "*.md",
    ]);
    assert!(o.status.success());
    let printed2 = String::from_utf8(o.stdout).unwrap().trim().to_string();
    assert_ne!(printed2, printed);
    assert!(fs::metadata(&filtered).unwrap().len() > 0);
}

#[test]
fn package_of_a_missing_dir_fails_cleanly() {
    let out = tempfile::tempdir().unwrap();
    let o = run(&[
        "package",
        "/nonexistent/rflux-dir",
        "-o",
        out.path().join("x.tar.gz").to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("package"));
    assert!(!out.path().join("x.tar.gz").exists());
}
