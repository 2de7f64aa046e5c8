//! Conformance of the tar stream with Go's `archive/tar` as Flux drives it (`Storage.Archive`:
//! `filepath.Walk`, `tar.FileInfoHeader`, sanitized header, default `tar.Writer` format choice).
//! Needs a `go` toolchain on PATH; without it the test prints that it skipped and passes.

#![allow(clippy::unwrap_used)]

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;
use std::process::Command;

use source_controller::artifact::IgnoreRules;
use source_controller::artifact::archive::write_tar;

/// A small Go program (written for this test) that walks a directory the way Flux's archiver
/// does, without ignore rules, and writes the uncompressed tar to stdout.
const GO_ARCHIVER: &str = r#"package main

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"time"
)

func main() {
	root := os.Args[1]
	tw := tar.NewWriter(os.Stdout)
	walkErr := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if !(fi.Mode().IsRegular() || fi.IsDir()) {
			return nil
		}
		hdr, err := tar.FileInfoHeader(fi, p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		hdr.Name = rel
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}, time.Time{}
		switch {
		case fi.IsDir():
			hdr.Mode = 0o750
		case fi.Mode().Perm()&0o111 != 0:
			hdr.Mode = 0o700
		default:
			hdr.Mode = 0o600
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.IsDir() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if walkErr != nil {
		panic(walkErr)
	}
	if err := tw.Close(); err != nil {
		panic(err)
	}
}
"#;

fn write(root: &Path, rel: &str, content: &[u8], mode: u32) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(&p, content).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn tar_stream_is_byte_identical_to_go_archive_tar() {
    if Command::new("go").arg("version").output().is_err() {
        eprintln!("skipping: no `go` toolchain on PATH");
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let prog = work.path().join("prog");
    fs::create_dir(&prog).unwrap();
    fs::write(prog.join("main.go"), GO_ARCHIVER).unwrap();
    fs::write(prog.join("go.mod"), "module archiver\n\ngo 1.21\n").unwrap();
    let bin = work.path().join("archiver");
    let build = Command::new("go")
        .arg("build")
        .arg("-o")
        .arg(&bin)
        .arg(".")
        .current_dir(&prog)
        .env("GOFLAGS", "-mod=mod")
        .env("GOTOOLCHAIN", "local")
        .output()
        .unwrap();
    if !build.status.success() {
        eprintln!(
            "skipping: go build failed: {}",
            String::from_utf8_lossy(&build.stderr)
        );
        return;
    }

    let tree = work.path().join("tree");
    let big: Vec<u8> = (0..200_003u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    write(&tree, "apps/a/config.yaml", b"a: 1\n", 0o644);
    write(&tree, "apps/B.yaml", b"upper\n", 0o644);
    write(&tree, "scripts/run.sh", b"#!/bin/sh\n", 0o755);
    write(&tree, "scripts/group-x", b"g\n", 0o610);
    write(&tree, "setuid", b"", 0o4755);
    write(&tree, "empty.txt", b"", 0o644);
    write(&tree, "data/big.bin", &big, 0o600);
    write(&tree, "unicodé/ñame.yaml", b"x\n", 0o644);
    let prefix_split = format!("{}/{}.yaml", "d".repeat(110), "f".repeat(60));
    write(&tree, &prefix_split, b"split\n", 0o644);
    let pax_flat = format!("{}.yaml", "z".repeat(140));
    write(&tree, &pax_flat, b"pax\n", 0o644);
    let pax_deep = format!(
        "{}/{}/{}.y",
        "p".repeat(120),
        "q".repeat(120),
        "r".repeat(99)
    );
    write(&tree, &pax_deep, b"deep\n", 0o644);
    let exactly_100 = "e".repeat(100);
    write(&tree, &exactly_100, b"100\n", 0o644);
    write(&tree, ".git/HEAD", b"ref: refs/heads/main\n", 0o644);
    fs::create_dir_all(tree.join("emptydir")).unwrap();
    symlink("apps/B.yaml", tree.join("link.yaml")).unwrap();

    let go = Command::new(&bin).arg(&tree).output().unwrap();
    assert!(
        go.status.success(),
        "{}",
        String::from_utf8_lossy(&go.stderr)
    );
    let mut ours = Vec::new();
    write_tar(&tree, &IgnoreRules::none(), &mut ours).unwrap();
    assert_eq!(ours.len(), go.stdout.len());
    if let Some(i) = ours.iter().zip(&go.stdout).position(|(a, b)| a != b) {
        panic!(
            "first difference at byte {i} (block {}, offset {})",
            i / 512,
            i % 512
        );
    }
}
