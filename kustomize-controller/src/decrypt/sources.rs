//! Before the build: Flux's `DecryptSources`. Starting at `spec.path`, every kustomization
//! reachable through local `resources` and `components` directories is read, and its
//! `secretGenerator` `files` and `envs` and its local `patches[].path` files that hold a SOPS
//! document are decrypted into a [`FileOverlay`]: the build reads the plaintext from memory,
//! and nothing is written to disk (Flux overwrites the files in its working copy).
//!
//! Each file must be a regular file inside the artifact root (after resolving symlinks), of at
//! most [`MAX_FILE_BYTES`], and is decrypted only when it holds its format's marker. Stricter
//! than Flux where it costs nothing: a path that climbs out of the root, or a symlink that
//! leads out of it, is an error naming the file (Flux clamps it to the root and then usually
//! fails with "no such file"); every error names the file it is about.

use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};

use rflux_kustomize::{FileOverlay, KUSTOMIZATION_FILE_NAMES};
use rflux_sops::{Format, Keys, MacCheck, SopsError};
use serde_json::Value;

/// Flux's limit on a file decrypted before the build (5 MiB).
pub const MAX_FILE_BYTES: u64 = 5 * 1024 * 1024;

/// Most kustomizations visited (a hostile tree of directories cannot keep the walk going).
const MAX_KUSTOMIZATIONS: usize = 10_000;

/// Most bytes read by one walk, all files together (the build's own default budget).
const MAX_TOTAL_BYTES: u64 = rflux_kustomize::DEFAULT_MAX_BYTES;

/// Why the sources could not be decrypted; shown as `error decrypting sources: …`.
#[derive(Debug, thiserror::Error)]
pub enum SourcesError {
    #[error("error decrypting sources: {path}: {message}")]
    File { path: String, message: String },
    #[error("error decrypting sources: {path}: {source}")]
    Decrypt {
        path: String,
        #[source]
        source: SopsError,
    },
    #[error("error decrypting sources: {0}")]
    Walk(String),
}

/// What kind of entry named a file: decides its format.
#[derive(Debug, Clone, Copy)]
enum Role {
    /// A `secretGenerator` `files` entry: the format comes from the key's name.
    GeneratorFile,
    /// A `secretGenerator` `envs` entry: the file's format, binary read as dotenv.
    Env,
    /// A `patches[].path`: the file's format.
    Patch,
}

/// Decrypts the SOPS-encrypted generator and patch files of the kustomizations under `path`
/// (relative to `root`, the unpacked artifact), into memory.
pub fn decrypt_sources(root: &Path, path: &str, keys: &Keys) -> Result<FileOverlay, SourcesError> {
    let real_root = root
        .canonicalize()
        .map_err(|e| SourcesError::Walk(format!("artifact root: {e}")))?;
    let mut walk = Walk {
        root: &real_root,
        keys,
        overlay: FileOverlay::default(),
        visited: HashSet::new(),
        decrypted: HashSet::new(),
        read: 0,
    };
    let start = relative(&real_root, &rflux_core::secure_join(&real_root, path));
    // Flux generates a kustomization when the path has none; it names only resources.
    if let Some(rel) = start
        && find_kustomization(&real_root.join(&rel))?.is_some()
    {
        walk.visit(&rel)?;
    }
    Ok(walk.overlay)
}

struct Walk<'a> {
    root: &'a Path,
    keys: &'a Keys,
    overlay: FileOverlay,
    visited: HashSet<PathBuf>,
    decrypted: HashSet<PathBuf>,
    /// Bytes read so far.
    read: u64,
}

impl Walk<'_> {
    /// One kustomization directory, `dir` relative to the root.
    fn visit(&mut self, dir: &Path) -> Result<(), SourcesError> {
        let real = self.root.join(dir);
        if !self.visited.insert(real.clone()) {
            return Ok(());
        }
        if self.visited.len() > MAX_KUSTOMIZATIONS {
            return Err(SourcesError::Walk(format!(
                "more than {MAX_KUSTOMIZATIONS} kustomizations"
            )));
        }
        let Some(file) = find_kustomization(&real)? else {
            return Err(SourcesError::Walk(format!(
                "{}: no kustomization file found",
                show(dir)
            )));
        };
        let file_rel = dir.join(file);
        let text = self.read(&real.join(file), &file_rel)?;
        let text = String::from_utf8(text).map_err(|_| SourcesError::File {
            path: show(&file_rel),
            message: "not valid UTF-8".into(),
        })?;
        let k = rflux_kustomize::yaml::parse_one(&text, &show(&file_rel)).map_err(|e| {
            SourcesError::File {
                path: show(&file_rel),
                message: e.to_string(),
            }
        })?;
        for generator in list(&k, "secretGenerator") {
            for entry in strings(generator, "files") {
                let (key, file) = match entry.split_once('=') {
                    Some((key, file)) => (key.to_string(), file),
                    None => (base_name(entry), entry),
                };
                self.file(dir, file, Role::GeneratorFile, &key)?;
            }
            for env in strings(generator, "envs") {
                self.file(dir, env, Role::Env, env)?;
            }
        }
        for patch in list(&k, "patches") {
            if let Some(p) = patch.get("path").and_then(Value::as_str)
                && !is_url(p)
            {
                self.file(dir, p, Role::Patch, p)?;
            }
        }
        let mut subdirs = Vec::new();
        for field in ["resources", "components"] {
            for entry in list(&k, field).iter().filter_map(|v| v.as_str()) {
                if is_url(entry) {
                    continue;
                }
                let Ok(joined) = rflux_core::strict_join(self.root, dir.join(entry)) else {
                    continue;
                };
                // missing paths and plain files are the build's business
                if let Ok(real) = joined.canonicalize()
                    && real.is_dir()
                    && let Some(rel) = relative(self.root, &real)
                {
                    subdirs.push(rel);
                }
            }
        }
        for sub in subdirs {
            self.visit(&sub)?;
        }
        Ok(())
    }

    /// One file named by `entry` in the kustomization at `dir`.
    fn file(
        &mut self,
        dir: &Path,
        entry: &str,
        role: Role,
        name: &str,
    ) -> Result<(), SourcesError> {
        let named = dir.join(entry);
        let err = |message: String| SourcesError::File {
            path: show(&named),
            message,
        };
        let joined = rflux_core::strict_join(self.root, &named)
            .map_err(|_| err("the path leads out of the artifact root".into()))?;
        let real = match joined.canonicalize() {
            Ok(r) => r,
            // a missing file is the build's error to report, as in Flux's later kustomize run
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(err(e.to_string())),
        };
        if !real.starts_with(self.root) {
            return Err(err("a symlink leads out of the artifact root".into()));
        }
        if !self.decrypted.insert(real.clone()) {
            return Ok(());
        }
        let meta = std::fs::metadata(&real).map_err(|e| err(e.to_string()))?;
        if !meta.is_file() {
            return Err(err(
                "cannot decrypt irregular file as it has file mode type bits set".into(),
            ));
        }
        let bytes = self.read(&real, &named)?;
        let format = match role {
            Role::GeneratorFile => Format::for_path(name),
            Role::Env => match Format::for_path(name) {
                Format::Binary => Format::Dotenv,
                f => f,
            },
            Role::Patch => Format::for_path(name),
        };
        if !format.has_marker(&bytes) {
            return Ok(());
        }
        // The file is as sops wrote it: its MAC is checked (Flux skips this).
        let plain = rflux_sops::decrypt(&bytes, format, format, self.keys, MacCheck::Verify)
            .map_err(|source| SourcesError::Decrypt {
                path: show(&named),
                source,
            })?;
        self.overlay.insert(real, plain.to_vec());
        Ok(())
    }
}

impl Walk<'_> {
    /// [`read_limited`], counted against [`MAX_TOTAL_BYTES`].
    fn read(&mut self, real: &Path, named: &Path) -> Result<Vec<u8>, SourcesError> {
        let bytes = read_limited(real, named)?;
        self.read = self.read.saturating_add(bytes.len() as u64);
        if self.read > MAX_TOTAL_BYTES {
            return Err(SourcesError::Walk(format!(
                "the files to decrypt hold more than {MAX_TOTAL_BYTES} bytes"
            )));
        }
        Ok(bytes)
    }
}

/// The kustomization file of a directory, if it has one; two are an error, as in kustomize.
fn find_kustomization(dir: &Path) -> Result<Option<&'static str>, SourcesError> {
    let found: Vec<&str> = KUSTOMIZATION_FILE_NAMES
        .into_iter()
        .filter(|n| dir.join(n).is_file())
        .collect();
    match found.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one)),
        _ => Err(SourcesError::Walk(format!(
            "found multiple kustomization files in {}",
            dir.display()
        ))),
    }
}

/// Reads at most [`MAX_FILE_BYTES`] of a regular file; more is Flux's size error.
fn read_limited(real: &Path, named: &Path) -> Result<Vec<u8>, SourcesError> {
    let err = |message: String| SourcesError::File {
        path: show(named),
        message,
    };
    let file = std::fs::File::open(real).map_err(|e| err(e.to_string()))?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| err(e.to_string()))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        let size = std::fs::metadata(real)
            .map(|m| m.len())
            .unwrap_or(bytes.len() as u64);
        return Err(err(format!(
            "cannot decrypt file with size ({size} bytes) exceeding limit ({MAX_FILE_BYTES})"
        )));
    }
    Ok(bytes)
}

fn list<'a>(k: &'a Value, field: &str) -> &'a [Value] {
    k.get(field)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn strings<'a>(v: &'a Value, field: &str) -> impl Iterator<Item = &'a str> {
    list(v, field).iter().filter_map(Value::as_str)
}

fn is_url(s: &str) -> bool {
    s.contains("://")
}

fn base_name(p: &str) -> String {
    Path::new(p)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// `path` relative to `root`, when it is inside it.
fn relative(root: &Path, path: &Path) -> Option<PathBuf> {
    path.strip_prefix(root).ok().map(Path::to_path_buf)
}

fn show(p: &Path) -> String {
    let s = p.display().to_string();
    if s.is_empty() { ".".into() } else { s }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        for (p, c) in files {
            let f = t.path().join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, c).unwrap();
        }
        t
    }

    #[test]
    fn plain_files_are_left_to_the_build() {
        let t = tree(&[
            (
                "app/kustomization.yaml",
                "resources: [../base]\nsecretGenerator:\n- name: s\n  files: [k=plain.txt]\n  envs: [a.env]\npatches:\n- path: p.yaml\n- path: https://example.invalid/p.yaml\n",
            ),
            ("app/plain.txt", "not encrypted"),
            ("app/a.env", "A=1\n"),
            ("app/p.yaml", "kind: X\n"),
            ("base/kustomization.yaml", "resources: []\n"),
        ]);
        let o = decrypt_sources(t.path(), "app", &Keys::default()).unwrap();
        assert!(o.is_empty());
    }

    #[test]
    fn files_out_of_the_root_or_irregular_are_errors_naming_them() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.env"), "sops_mac=ENC[x]").unwrap();
        let t = tree(&[(
            "app/kustomization.yaml",
            "secretGenerator:\n- name: s\n  envs: [../../x.env]\n",
        )]);
        let e = decrypt_sources(t.path(), "app", &Keys::default())
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "error decrypting sources: app/../../x.env: the path leads out of the artifact root"
        );
        let t = tree(&[(
            "app/kustomization.yaml",
            "secretGenerator:\n- name: s\n  envs: [link.env]\n",
        )]);
        std::os::unix::fs::symlink(
            outside.path().join("secret.env"),
            t.path().join("app/link.env"),
        )
        .unwrap();
        let e = decrypt_sources(t.path(), "app", &Keys::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("app/link.env: a symlink leads out of the artifact root"),
            "{e}"
        );
        let t = tree(&[(
            "kustomization.yaml",
            "secretGenerator:\n- name: s\n  files: [dir]\n",
        )]);
        std::fs::create_dir(t.path().join("dir")).unwrap();
        let e = decrypt_sources(t.path(), ".", &Keys::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("dir: cannot decrypt irregular file"), "{e}");
    }

    #[test]
    fn big_files_are_refused_with_flux_words() {
        let t = tree(&[(
            "kustomization.yaml",
            "secretGenerator:\n- name: s\n  files: [big.bin]\n",
        )]);
        std::fs::write(
            t.path().join("big.bin"),
            vec![b'x'; MAX_FILE_BYTES as usize + 1],
        )
        .unwrap();
        let e = decrypt_sources(t.path(), ".", &Keys::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.ends_with(
                "big.bin: cannot decrypt file with size (5242881 bytes) exceeding limit (5242880)"
            ),
            "{e}"
        );
    }

    #[test]
    fn an_encrypted_file_without_keys_names_the_file() {
        let t = tree(&[
            (
                "kustomization.yaml",
                "secretGenerator:\n- name: s\n  envs: [s.env]\n",
            ),
            (
                "s.env",
                "A=ENC[AES256_GCM,data:eA==,iv:eA==,tag:eA==,type:str]\nsops_mac=ENC[AES256_GCM,data:eA==,iv:eA==,tag:eA==,type:str]\nsops_lastmodified=2024-01-01T00:00:00Z\nsops_version=3.13.3\n",
            ),
        ]);
        let e = decrypt_sources(t.path(), ".", &Keys::default())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("error decrypting sources: s.env: "), "{e}");
    }
}
