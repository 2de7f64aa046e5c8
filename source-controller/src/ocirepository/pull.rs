//! Stages pull and artifact: the manifest by digest, the selected layer streamed to disk (size
//! and digest checked while reading), extracted or kept as is; then packaged into the storage,
//! the `latest.tar.gz` link moved, and the artifact recorded in status.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rflux_common::api::ocirepository::{OciLayerOperation, OciRepositoryStatus};
use rflux_common::runtime::StageError;
use rflux_common::untar::{UntarLimits, untar};
use rflux_oci::client::Client;
use rflux_oci::error::OciError;
use rflux_oci::manifest::{Descriptor, Manifest};

use super::refs::artifact_file_name;
use super::run::{KIND_DIR, Resolved, Run};
use super::status as st;
use super::store::{copy_into_storage, link_latest};
use crate::artifact::IgnoreRules;
use crate::source::status::to_api_artifact;

/// What the pull stage left in the working directory.
pub(super) struct Pulled {
    work: tempfile::TempDir,
    /// The extracted tree (extract) or the layer file (copy).
    content: PathBuf,
    operation: OciLayerOperation,
    /// The manifest's annotations (`artifact.metadata`).
    annotations: BTreeMap<String, String>,
}

fn layer_failed(msg: String) -> StageError {
    StageError::generic(st::FETCH_FAILED, st::LAYER_OPERATION_FAILED, msg)
}

/// The layer `spec.layerSelector.mediaType` names, or the first.
pub(super) fn select_layer<'m>(
    manifest: &'m Manifest,
    media_type: Option<&str>,
) -> Result<&'m Descriptor, String> {
    if manifest.layers.is_empty() {
        return Err("no layers found in artifact".into());
    }
    match media_type.filter(|m| !m.is_empty()) {
        None => Ok(&manifest.layers[0]),
        Some(mt) => manifest
            .layers
            .iter()
            .find(|l| l.media_type == mt)
            .ok_or_else(|| format!("failed to find layer with media type '{mt}' in artifact")),
    }
}

/// Stage pull: the manifest by digest, the selected layer, extracted or copied into a fresh
/// working directory.
pub(super) async fn reconcile_pull(
    run: &Run<'_>,
    client: &Client,
    resolved: &Resolved,
) -> Result<Pulled, StageError> {
    let spec = run.spec();
    let manifest = client
        .manifest(&resolved.digest)
        .await
        .map_err(|e| match e {
            OciError::NotAManifest { .. } | OciError::Schema1 { .. } | OciError::Json(_) => {
                layer_failed(format!("failed to parse artifact manifest: {e}"))
            }
            other => StageError::generic(
                st::FETCH_FAILED,
                st::PULL_FAILED,
                format!("failed to pull artifact from '{}': {other}", spec.url),
            ),
        })?;
    let media_type = spec
        .layer_selector
        .as_ref()
        .and_then(|s| s.media_type.as_deref());
    let layer = select_layer(&manifest, media_type)
        .map_err(layer_failed)?
        .clone();
    let operation = spec.layer_operation();
    let work = tempfile::Builder::new()
        .prefix(&format!("{}-{}-{}-", KIND_DIR, run.ns, run.name))
        .tempdir()
        .map_err(|e| {
            StageError::generic(
                st::STORAGE_OPERATION_FAILED,
                st::DIRECTORY_CREATION_FAILED,
                format!("failed to create temporary working directory: {e}"),
            )
        })?;
    let max = run.ctx.oci.max_layer_bytes;
    let what = match operation {
        OciLayerOperation::Extract => "extract layer contents from",
        OciLayerOperation::Copy => "copy layer from",
    };
    let op_failed = move |e: String| layer_failed(format!("failed to {what} artifact: {e}"));
    let blob = work.path().join(format!("{}.tgz", layer.digest));
    client
        .blob_to_file(&layer, &blob, max)
        .await
        .map_err(|e| op_failed(e.to_string()))?;
    let content = match operation {
        OciLayerOperation::Copy => blob,
        OciLayerOperation::Extract => {
            let dir = work.path().join("content");
            let limits = run.ctx.oci.untar;
            let src = blob.clone();
            let out = dir.clone();
            tokio::task::spawn_blocking(move || extract(&src, &out, &limits))
                .await
                .map_err(|e| op_failed(format!("extraction task failed: {e}")))?
                .map_err(op_failed)?;
            dir
        }
    };
    Ok(Pulled {
        work,
        content,
        operation,
        annotations: manifest.annotations.clone(),
    })
}

/// Untars the gzip layer `src` into the new directory `dest`, then deletes `src`.
fn extract(src: &Path, dest: &Path, limits: &UntarLimits) -> Result<(), String> {
    std::fs::create_dir(dest).map_err(|e| format!("create '{}': {e}", dest.display()))?;
    let file = std::fs::File::open(src).map_err(|e| format!("open layer: {e}"))?;
    untar(std::io::BufReader::new(file), dest, limits).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(src);
    Ok(())
}

/// Stage artifact: the extracted tree (less `.sourceignore` and `spec.ignore`) archived, or the
/// copied layer stored unchanged; superseded artifacts garbage collected; `latest.tar.gz`
/// moved; the artifact recorded. Returns the `NewArtifact` event message.
pub(super) async fn reconcile_artifact(
    run: &Run<'_>,
    status: &mut OciRepositoryStatus,
    pulled: Pulled,
    resolved: &Resolved,
) -> Result<String, StageError> {
    let spec = run.spec();
    let storage = &run.ctx.storage;
    let storage_failed = |reason: &'static str, msg: String| {
        StageError::generic(st::STORAGE_OPERATION_FAILED, reason, msg)
    };
    let artifact = storage
        .new_artifact_for(
            KIND_DIR,
            run.ns,
            run.name,
            &resolved.revision,
            &artifact_file_name(&resolved.revision),
        )
        .map_err(|e| storage_failed(st::ARCHIVE_OPERATION_FAILED, e.to_string()))?;
    let artifact = match pulled.operation {
        OciLayerOperation::Extract => {
            let rules =
                IgnoreRules::load(&pulled.content, spec.ignore.as_deref()).map_err(|e| {
                    storage_failed(
                        "SourceIgnoreError",
                        format!("failed to load source ignore patterns: {e}"),
                    )
                })?;
            storage
                .archive_async(artifact, pulled.content.clone(), rules)
                .await
                .map_err(|e| {
                    storage_failed(
                        st::ARCHIVE_OPERATION_FAILED,
                        format!("unable to archive artifact to storage: {e}"),
                    )
                })?
        }
        OciLayerOperation::Copy => copy_into_storage(storage, artifact, pulled.content.clone())
            .await
            .map_err(|e| {
                storage_failed(
                    st::ARCHIVE_OPERATION_FAILED,
                    format!("unable to copy artifact to storage: {e}"),
                )
            })?,
    };
    drop(pulled.work);
    if let Err(e) = storage.garbage_collect_async(&artifact).await {
        tracing::warn!(error = %e, "garbage collection failed");
    }
    let latest_url = match link_latest(storage, &artifact) {
        Ok(url) => Some(url),
        Err(e) => {
            let msg = format!("failed to update status URL symlink: {e}");
            run.event(
                rflux_common::runtime::EventType::Trace,
                "SymlinkUpdateFailed",
                &msg,
            )
            .await;
            None
        }
    };
    let now = jiff::Timestamp::now();
    let mut api_artifact = to_api_artifact(&artifact, now);
    api_artifact.metadata = (!pulled.annotations.is_empty()).then_some(pulled.annotations);
    let message = st::new_artifact_message(
        &resolved.revision,
        &spec.url,
        api_artifact.metadata.as_ref(),
    );
    st::artifact_stored(status, spec, api_artifact, latest_url, run.generation, now);
    Ok(message)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn manifest(types: &[&str]) -> Manifest {
        let layers: Vec<serde_json::Value> = types
            .iter()
            .enumerate()
            .map(|(i, t)| serde_json::json!({"mediaType": t, "digest": format!("sha256:{i}"), "size": 1}))
            .collect();
        Manifest {
            media_type: String::new(),
            config: Descriptor::default(),
            layers: serde_json::from_value(serde_json::Value::Array(layers)).unwrap(),
            annotations: BTreeMap::new(),
            artifact_type: None,
            digest: String::new(),
            raw: Vec::new(),
            index_digest: None,
        }
    }

    #[test]
    fn layer_selection_follows_flux() {
        let m = manifest(&["a", "b", "b"]);
        assert_eq!(select_layer(&m, None).unwrap().digest, "sha256:0");
        assert_eq!(select_layer(&m, Some("")).unwrap().digest, "sha256:0");
        assert_eq!(select_layer(&m, Some("b")).unwrap().digest, "sha256:1");
        assert_eq!(
            select_layer(&m, Some("c")).unwrap_err(),
            "failed to find layer with media type 'c' in artifact"
        );
        assert_eq!(
            select_layer(&manifest(&[]), None).unwrap_err(),
            "no layers found in artifact"
        );
    }
}
