//! The build stage's work, shared by the pipeline and the build-time benchmark
//! (`bench/src/bin/rflux-buildtime.rs`) so that the benchmark times the controller's own code.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rflux_common::api::kustomization::KustomizationSpec;
use rflux_sops::Keys;
use serde_json::Value;

use crate::decrypt::objects::ObjectError;
use crate::decrypt::sources::SourcesError;
use crate::decrypt::{decrypt_objects, decrypt_sources};

use super::spec::overrides_from_spec;

/// Why [`build_objects`] gave no objects.
#[derive(Debug, thiserror::Error)]
pub enum BuildObjectsError {
    /// The blocking task did not complete (it panicked or the runtime is shutting down).
    #[error("build task failed: {0}")]
    Task(String),
    /// The engine refused the tree.
    #[error(transparent)]
    Build(#[from] rflux_kustomize::KustomizeError),
    /// A generator or patch file could not be decrypted.
    #[error(transparent)]
    Sources(#[from] SourcesError),
    /// A built object could not be decrypted.
    #[error(transparent)]
    Objects(#[from] ObjectError),
}

/// Builds `spec.path` under `root` (the unpacked artifact) with Flux's overrides from `spec`,
/// on a blocking thread, within the engine's budget bounded by `timeout`. With `keys`
/// (`spec.decryption`), SOPS-encrypted generator and patch files are decrypted into memory
/// before the build and encrypted objects after it, on the same thread. With `generate_names`
/// (a Kustomization opted in to Argo CD semantics), objects named by `generateName` alone are
/// built instead of refused.
pub async fn build_objects(
    root: &Path,
    spec: &KustomizationSpec,
    timeout: Duration,
    keys: Option<Arc<Keys>>,
    generate_names: bool,
) -> Result<Vec<Value>, BuildObjectsError> {
    let path = spec.path.clone().unwrap_or_else(|| "./".into());
    let overrides = rflux_kustomize::FluxOverrides {
        generate_names,
        ..overrides_from_spec(spec)
    };
    let root: PathBuf = root.to_path_buf();
    // The build's own budget: `spec.timeout`, and the engine's caps on objects, bytes and
    // depth (a hostile tree ends in a BuildFailed, not a stuck work slot).
    let budget = rflux_kustomize::Budget {
        timeout,
        ..rflux_kustomize::Budget::default()
    };
    tokio::task::spawn_blocking(move || {
        let overlay = match &keys {
            Some(k) => Some(Arc::new(decrypt_sources(&root, &path, k)?)),
            None => None,
        };
        let built = rflux_kustomize::build_flux_overlaid(
            &root,
            Path::new(&path),
            &overrides,
            &budget,
            overlay,
        )?;
        let mut objects: Vec<Value> = built.into_iter().map(|r| r.obj).collect();
        if let Some(k) = &keys {
            decrypt_objects(&mut objects, k)?;
        }
        Ok(objects)
    })
    .await
    .map_err(|e| BuildObjectsError::Task(e.to_string()))?
}
