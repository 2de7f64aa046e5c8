//! The storage stage every source kind runs first.

use rflux_common::runtime::EventType;

use super::reconcile::{Run, SourceObject};
use super::status::{self as st, SourceStatus};
use crate::artifact::Artifact as StoredArtifact;

/// Stage storage: the stored artifact must still exist and match its digest (a corrupt file is
/// deleted); superseded artifacts are garbage collected and the artifact URL is rewritten for
/// the current host name. Without a usable artifact, status says one is being built.
pub async fn reconcile_storage<K: SourceObject>(run: &Run<'_, K>, status: &mut K::Status) {
    let now = jiff::Timestamp::now;
    let Some(api_art) = status.artifact().cloned() else {
        st::progress(status, "building artifact", run.generation, now());
        return;
    };
    let mut stored = st::from_api_artifact(&api_art);
    let storage = &run.ctx.storage;
    let Some(stamp) = storage.artifact_stamp(&stored) else {
        st::artifact_missing(status, run.generation, now());
        return;
    };
    // The file last verified, unchanged, is not hashed again (`artifact/checked.rs`).
    if !storage.checked().verified(&stamp, &stored.digest) {
        if !stored_artifact_intact(run, &stored).await {
            st::artifact_missing(status, run.generation, now());
            return;
        }
        storage
            .checked()
            .record_verified(stamp.clone(), &stored.digest);
    }
    // Nothing new since a collection that left only this file: nothing to collect.
    if !storage.checked().clean(&stamp, &stored.digest) {
        match storage.garbage_collect_rest_async(&stored).await {
            Ok((deleted, rest)) => {
                storage
                    .checked()
                    .record_collected(&stamp, &stored.digest, rest);
                if !deleted.is_empty() {
                    let message = format!("garbage collected {} artifacts", deleted.len());
                    run.event(EventType::Trace, "GarbageCollectionSucceeded", &message)
                        .await;
                }
            }
            Err(e) => tracing::warn!(error = %e, "garbage collection failed"),
        }
    }
    storage.set_artifact_url(&mut stored);
    if let Some(a) = status.artifact_mut().as_mut() {
        a.url = stored.url;
    }
}

/// Whether the stored artifact's file (known to exist) has its recorded digest. A file that
/// fails the check is deleted, with an `ArtifactVerificationFailed` event.
async fn stored_artifact_intact<K: SourceObject>(
    run: &Run<'_, K>,
    stored: &StoredArtifact,
) -> bool {
    let storage = run.ctx.storage.clone();
    let check = stored.clone();
    match tokio::task::spawn_blocking(move || storage.verify_artifact(&check)).await {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            let message = format!("failed to verify integrity of artifact: {e}");
            run.event(EventType::Warning, "ArtifactVerificationFailed", &message)
                .await;
            if let Ok(p) = run.ctx.storage.local_path(&stored.path) {
                let _ = std::fs::remove_file(p);
            }
            false
        }
        Err(_) => false,
    }
}
