//! The two storage operations only OCIRepository needs: storing a layer blob unchanged (`copy`
//! mode) and keeping the `latest.tar.gz` link that `status.url` points to.

use std::fs;
use std::io::{self, Read, Write};
use std::path::PathBuf;

use crate::artifact::storage::TEMP_PREFIX;
use crate::artifact::storage::now_rfc3339;
use crate::artifact::{Artifact, ArtifactError, Storage};

/// Name of the link to the current artifact in the object's directory.
pub const LATEST: &str = "latest.tar.gz";

/// Copies `src` to the artifact's file under its lock, atomically, and sets its digest (that of
/// the bytes, so the layer digest), size and time. The blocking work runs off the async workers.
pub async fn copy_into_storage(
    storage: &Storage,
    mut artifact: Artifact,
    src: PathBuf,
) -> Result<Artifact, ArtifactError> {
    let storage = storage.clone();
    tokio::task::spawn_blocking(move || {
        copy_file(&storage, &mut artifact, &src)?;
        Ok(artifact)
    })
    .await
    .map_err(|e| ArtifactError::io("copy", std::path::Path::new(""), io::Error::other(e)))?
}

fn copy_file(
    storage: &Storage,
    artifact: &mut Artifact,
    src: &std::path::Path,
) -> Result<(), ArtifactError> {
    let local = storage.local_path(&artifact.path)?;
    let dir = storage.mkdir_artifact(artifact)?;
    let _lock = storage.lock(artifact)?;
    let mut input = fs::File::open(src).map_err(|e| ArtifactError::io("open", src, e))?;
    let mut tmp = tempfile::Builder::new()
        .prefix(TEMP_PREFIX)
        .tempfile_in(&dir)
        .map_err(|e| ArtifactError::io("create temp file in", &dir, e))?;
    let mut hasher = storage.digest_algorithm().hasher();
    let mut buf = vec![0u8; 64 * 1024];
    let mut size = 0u64;
    loop {
        let n = input
            .read(&mut buf)
            .map_err(|e| ArtifactError::io("read", src, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        tmp.write_all(&buf[..n])
            .map_err(|e| ArtifactError::io("write", tmp.path(), e))?;
        size += n as u64;
    }
    tmp.as_file()
        .sync_all()
        .map_err(|e| ArtifactError::io("sync", tmp.path(), e))?;
    tmp.persist(&local)
        .map_err(|e| ArtifactError::io("rename temp file to", &local, e.error))?;
    artifact.digest = hasher.finish().to_string();
    artifact.size = size;
    artifact.last_update_time = now_rfc3339();
    Ok(())
}

/// Points `<object dir>/latest.tar.gz` at the artifact's file (a relative symlink, replaced
/// atomically) and returns its URL.
pub fn link_latest(storage: &Storage, artifact: &Artifact) -> Result<String, ArtifactError> {
    let local = storage.local_path(&artifact.path)?;
    let dir = local
        .parent()
        .ok_or_else(|| ArtifactError::InvalidPath(artifact.path.clone()))?;
    let target = local
        .file_name()
        .ok_or_else(|| ArtifactError::InvalidPath(artifact.path.clone()))?;
    let tmp = dir.join(format!("{TEMP_PREFIX}{LATEST}"));
    let _ = fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp).map_err(|e| ArtifactError::io("symlink", &tmp, e))?;
    let link = dir.join(LATEST);
    fs::rename(&tmp, &link).map_err(|e| ArtifactError::io("rename", &link, e))?;
    let rel = match artifact.path.rsplit_once('/') {
        Some((parent, _)) => format!("{parent}/{LATEST}"),
        None => LATEST.to_string(),
    };
    Ok(storage.url_for(&rel))
}
