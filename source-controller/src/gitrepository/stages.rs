//! The GitRepository reconcile pipeline as named stages, run in order by [`pipeline`] once
//! `Reconciling` is set (the stages of Flux's GitRepository reconciler):
//!
//! 1. [`reconcile_storage`]: the stored artifact still exists and matches its digest;
//!    superseded artifacts are garbage collected; its URL follows the current host name.
//! 2. [`validate_spec`]: a URL or provider that cannot work stalls.
//! 3. [`reconcile_auth`]: the remote, with its timeout, credentials and proxy.
//! 4. [`reconcile_include_artifacts`]: the included GitRepositories have artifacts.
//! 5. [`reconcile_source`]: the reference is resolved; an unchanged revision keeps the stored
//!    artifact and ends the pipeline, otherwise the commit is fetched.
//! 6. [`reconcile_verification`]: with `spec.verify`, the commit and/or tag signatures.
//! 7. [`reconcile_checkout`]: the tree (and submodules) in a temporary working directory.
//! 8. [`reconcile_include`]: the included artifacts copied into it.
//! 9. [`reconcile_artifact`]: the tree packaged into the storage and recorded in status.
//!
//! Each stage returns a [`StageError`] on failure; the status changes they make are the pure
//! functions of [`super::status`].

use std::path::{Path, PathBuf};

use kube::api::Api;
use rflux_common::api::gitrepository::{
    GitProvider, GitRepository, GitRepositorySpec, GitRepositoryStatus,
};
use rflux_common::api::meta::{Artifact as ApiArtifact, revisions_equal};
use rflux_common::runtime::conditions as cond;
use rflux_common::runtime::{EventType, StageError, parse_go_duration};
use rflux_git::{FetchedCommit, GitError, Remote, Session};

use super::auth::{SecretData, auth_from_secret, proxy_from_secret, url_redacted, validate_url};
use super::checkout::{CheckoutError, checkout, copy_include};
use super::refs::{RefError, RefSelector, Resolved, revision_commit, revision_string};
use super::status as st;
use super::verify::verify_fetched;
use crate::artifact::{IgnoreRules, git_artifact_file_name};
use crate::source::reconcile_storage;
use crate::source::{SourceObject, read_secret};

/// Storage directory (lowercase kind).
const KIND_DIR: &str = <GitRepository as SourceObject>::KIND_DIR;

/// One reconcile of one GitRepository.
pub(super) type Run<'a> = crate::source::Run<'a, GitRepository>;

impl Run<'_> {
    fn spec(&self) -> &GitRepositorySpec {
        &self.obj.spec
    }
}

/// What a successful pipeline did.
pub(super) enum Done {
    /// The stored artifact was kept (no change upstream).
    Unchanged,
    /// A new artifact was built from the commit with this message.
    Built { subject: String },
}

/// The pipeline after `Reconciling` is set; the stages mutate `status` as they go.
pub(super) async fn pipeline(
    run: &Run<'_>,
    status: &mut GitRepositoryStatus,
) -> Result<Done, StageError> {
    reconcile_storage(run, status).await;
    validate_spec(run.spec())?;
    // Drop a previous SourceVerified=False: reconcile_verification recomputes it.
    st::reset_verification(status, run.spec());
    let remote = reconcile_auth(run).await?;
    let included = reconcile_include_artifacts(run, status).await?;
    let Some(source) = reconcile_source(run, status, &remote, &included).await? else {
        return Ok(Done::Unchanged);
    };
    reconcile_verification(run, status, &source).await?;
    let subject = source.commit.commit.message.clone();
    let work = work_dir(run)?;
    let include_files = include_files(run, &included)?;
    reconcile_checkout(run.spec(), &remote, source.commit, work.path()).await?;
    reconcile_include(work.path(), include_files).await?;
    reconcile_artifact(run, status, work, included, &source.revision).await?;
    Ok(Done::Built { subject })
}

/// Configuration that cannot work without a spec change: the pipeline stalls.
fn validate_spec(spec: &GitRepositorySpec) -> Result<(), StageError> {
    if let Err(e) = validate_url(&spec.url) {
        return Err(StageError::stalling(
            st::FETCH_FAILED,
            st::URL_INVALID,
            format!("failed to parse url '{}': {e}", url_redacted(&spec.url)),
        ));
    }
    if spec.provider() != GitProvider::Generic {
        return Err(StageError::stalling(
            st::FETCH_FAILED,
            st::INVALID_PROVIDER_CONFIGURATION,
            format!(
                "provider '{}' is not supported yet by this source-controller",
                spec.provider().as_str()
            ),
        ));
    }
    Ok(())
}

/// Stage auth: the remote with `spec.timeout`, the credentials of `spec.secretRef` and the
/// proxy of `spec.proxySecretRef`.
async fn reconcile_auth(run: &Run<'_>) -> Result<Remote, StageError> {
    let spec = run.spec();
    let timeout = parse_go_duration(spec.timeout()).map_err(|e| {
        StageError::stalling(
            st::FETCH_FAILED,
            st::GIT_OPERATION_FAILED,
            format!("invalid timeout '{}': {e}", spec.timeout()),
        )
    })?;
    let secret = match &spec.secret_ref {
        Some(r) => Some(auth_secret(run, &r.name).await?),
        None => None,
    };
    let (auth, tls) = auth_from_secret(&spec.url, secret.as_ref()).map_err(|e| {
        StageError::generic(
            st::FETCH_FAILED,
            st::AUTHENTICATION_FAILED,
            format!("failed to configure authentication options: {e}"),
        )
    })?;
    let mut remote = Remote::new(spec.url.clone())
        .with_auth(auth)
        .with_tls(tls)
        .with_timeout(timeout)
        .with_limits(super::limits::fetch_limits());
    if let Some(r) = &spec.proxy_secret_ref {
        let data = auth_secret(run, &r.name).await?;
        let proxy = proxy_from_secret(&data).map_err(|e| {
            StageError::generic(
                st::FETCH_FAILED,
                st::AUTHENTICATION_FAILED,
                format!("failed to configure proxy options: {e}"),
            )
        })?;
        remote = remote.with_proxy(proxy);
    }
    Ok(remote)
}

/// A credentials or proxy Secret of the object's namespace.
async fn auth_secret(run: &Run<'_>, name: &str) -> Result<SecretData, StageError> {
    read_secret(&run.ctx.client, run.ns, name)
        .await
        .map_err(|e| {
            StageError::generic(
                st::FETCH_FAILED,
                st::AUTHENTICATION_FAILED,
                format!("failed to get secret '{}/{name}': {e}", run.ns),
            )
        })
}

/// Stage include artifacts: every included GitRepository must have an artifact (the pipeline
/// waits for it otherwise). Returns them in `spec.include` order, and marks the stored artifact
/// outdated when they changed.
async fn reconcile_include_artifacts(
    run: &Run<'_>,
    status: &mut GitRepositoryStatus,
) -> Result<Vec<ApiArtifact>, StageError> {
    let spec = run.spec();
    let git_api: Api<GitRepository> = Api::namespaced(run.ctx.client.clone(), run.ns);
    let mut included: Vec<ApiArtifact> = Vec::new();
    for inc in spec.include.as_deref().unwrap_or(&[]) {
        let name = &inc.repository.name;
        let dep = git_api.get(name).await.map_err(|e| {
            StageError::waiting(
                st::INCLUDE_UNAVAILABLE,
                st::NOT_FOUND,
                format!("could not get resource for include '{name}': {e}"),
            )
        })?;
        let art = dep.status.and_then(|s| s.artifact).ok_or_else(|| {
            StageError::waiting(
                st::INCLUDE_UNAVAILABLE,
                st::NO_ARTIFACT,
                format!("no artifact available for include '{name}'"),
            )
        })?;
        included.push(art);
    }
    st::includes_available(
        status,
        spec,
        &included,
        run.generation,
        jiff::Timestamp::now(),
    );
    Ok(included)
}

/// What the source stage fetched.
struct Source {
    commit: FetchedCommit,
    /// The revision of the fetched commit (`<ref>@sha1:<hex>`).
    revision: String,
    selector: RefSelector,
    /// The resolved reference name (`main`, `v1.0.0`; empty for a bare commit).
    ref_name: String,
}

/// Stage source: resolves the reference; when the stored artifact already holds that revision
/// and nothing content-affecting changed, it is kept (`None`). Otherwise the commit is fetched.
async fn reconcile_source(
    run: &Run<'_>,
    status: &mut GitRepositoryStatus,
    remote: &Remote,
    included: &[ApiArtifact],
) -> Result<Option<Source>, StageError> {
    let spec = run.spec();
    let now = jiff::Timestamp::now;
    let selector = RefSelector::from_spec(spec.reference.as_ref());
    let session = Session::connect(remote)
        .await
        .map_err(git_failed_remote(&spec.url))?;
    let (mut session, resolved) = resolve_reference(session, &selector, &spec.url).await?;
    let revision = resolved.revision();

    if st::artifact_up_to_date(spec, status, &revision, included) {
        session.close().await;
        st::keep_artifact(status, &revision, run.generation, now());
        let message =
            format!("no changes since last reconciliation: observed revision '{revision}'");
        run.event(EventType::Trace, "GitOperationSucceeded", &message)
            .await;
        return Ok(None);
    }
    if status
        .artifact
        .as_ref()
        .is_some_and(|a| !revisions_equal(&a.revision, &revision))
    {
        st::new_revision(status, &revision, run.generation, now());
    }

    let fetched = session.fetch_commit(&resolved.want).await;
    session.close().await;
    let commit = fetched.map_err(git_failed_remote(&spec.url))?;
    // A bare commit or commit+branch: the revision names the fetched commit.
    let revision = if commit.id != resolved.commit {
        revision_string(&resolved.name, &commit.id.to_hex())
    } else {
        revision
    };
    Ok(Some(Source {
        commit,
        revision,
        selector,
        ref_name: resolved.name,
    }))
}

/// Resolves `selector` on the remote, listing its refs only when the reference needs them.
/// Returns the session for the fetch.
async fn resolve_reference(
    mut session: Session,
    selector: &RefSelector,
    url: &str,
) -> Result<(Session, Resolved), StageError> {
    if !selector.needs_refs() {
        let resolved = selector.resolve(&[]).map_err(git_failed)?;
        return Ok((session, resolved));
    }
    let prefixes = selector.prefixes();
    let prefix_refs: Vec<&str> = prefixes.iter().map(String::as_str).collect();
    let refs = session
        .ls_refs(&prefix_refs)
        .await
        .map_err(git_failed_remote(url))?;
    match selector.resolve(&refs) {
        Ok(resolved) => Ok((session, resolved)),
        Err(e @ RefError::NotFound(_)) if refs.is_empty() => {
            // Nothing under the prefixes: an empty repository is reported as such.
            let all = session.ls_refs(&[]).await.map_err(git_failed_remote(url))?;
            session.close().await;
            if all.is_empty() {
                return Err(StageError::generic(
                    st::FETCH_FAILED,
                    st::EMPTY_GIT_REPOSITORY,
                    "git repository is empty",
                ));
            }
            Err(git_failed(e))
        }
        Err(e) => {
            session.close().await;
            Err(git_failed(e))
        }
    }
}

/// Stage verification (`spec.verify`): the signatures of the fetched commit and/or tag against
/// the public keys of `spec.verify.secretRef`.
async fn reconcile_verification(
    run: &Run<'_>,
    status: &mut GitRepositoryStatus,
    source: &Source,
) -> Result<(), StageError> {
    let Some(v) = &run.spec().verify else {
        return Ok(());
    };
    let keys = read_secret(&run.ctx.client, run.ns, &v.secret_ref.name)
        .await
        .map_err(|e| {
            StageError::generic(
                st::SOURCE_VERIFIED,
                st::VERIFICATION_ERROR,
                format!("public keys secret error: {e}"),
            )
        })?;
    let mode = v.effective_mode();
    let message = verify_fetched(
        mode,
        &source.selector,
        &source.ref_name,
        &source.commit,
        &keys,
    )
    .map_err(|e| st::verification_failed(&e))?;
    st::source_verified(
        status,
        mode,
        &message,
        run.generation,
        jiff::Timestamp::now(),
    );
    run.event(EventType::Trace, cond::SUCCEEDED_REASON, &message)
        .await;
    Ok(())
}

/// The temporary working directory of the checkout, named after the object.
fn work_dir(run: &Run<'_>) -> Result<tempfile::TempDir, StageError> {
    tempfile::Builder::new()
        .prefix(&format!("{KIND_DIR}-{}-{}-", run.ns, run.name))
        .tempdir()
        .map_err(|e| {
            storage_failed(
                st::DIRECTORY_CREATION_FAILED,
                format!("failed to create temporary working directory: {e}"),
            )
        })
}

/// An included artifact to copy into the tree.
struct IncludeFile {
    /// The artifact's archive in the storage.
    archive: PathBuf,
    /// `fromPath` in the archive.
    from: String,
    /// `toPath` in the tree.
    to: String,
    /// The included GitRepository (for messages).
    repository: String,
}

/// Where the included artifacts are in the storage (checked before the checkout).
fn include_files(run: &Run<'_>, included: &[ApiArtifact]) -> Result<Vec<IncludeFile>, StageError> {
    let includes = run.spec().include.as_deref().unwrap_or(&[]);
    includes
        .iter()
        .zip(included)
        .map(|(inc, art)| {
            let archive = run
                .ctx
                .storage
                .local_path(&art.path)
                .map_err(|e| storage_failed(st::ARCHIVE_OPERATION_FAILED, e))?;
            Ok(IncludeFile {
                archive,
                from: inc.from_path().to_string(),
                to: inc.to_path().to_string(),
                repository: inc.repository.name.clone(),
            })
        })
        .collect()
}

/// Stage checkout: the fetched tree in `dir` (sparse when `spec.sparseCheckout` says so), and
/// with `spec.recurseSubmodules` its submodules, fetched here.
async fn reconcile_checkout(
    spec: &GitRepositorySpec,
    remote: &Remote,
    commit: FetchedCommit,
    dir: &Path,
) -> Result<(), StageError> {
    let sparse = spec.sparse_checkout.clone().unwrap_or_default();
    let recurse = spec.recurse_submodules.unwrap_or(false);
    checkout(commit, remote, dir.to_path_buf(), sparse, recurse)
        .await
        .map_err(git_failed)
}

/// Stage include: each included artifact's `fromPath` copied to its `toPath` in the tree.
async fn reconcile_include(dir: &Path, files: Vec<IncludeFile>) -> Result<(), StageError> {
    let dir = dir.to_path_buf();
    let copied = tokio::task::spawn_blocking(move || -> Result<(), (CheckoutError, String)> {
        for f in &files {
            copy_include(&f.archive, &f.from, &dir, &f.to)
                .map_err(|e| (e, f.repository.clone()))?;
        }
        Ok(())
    })
    .await
    .map_err(|e| git_failed(format!("checkout task failed: {e}")))?;
    copied.map_err(|(e, repository)| {
        StageError::generic(
            st::STORAGE_OPERATION_FAILED,
            "CopyFailure",
            format!("failed to copy '{repository}' include: {e}"),
        )
    })
}

/// Stage artifact: the tree, less what `.sourceignore` and `spec.ignore` exclude, packaged into
/// the storage; superseded artifacts garbage collected; the new artifact recorded in status.
async fn reconcile_artifact(
    run: &Run<'_>,
    status: &mut GitRepositoryStatus,
    work: tempfile::TempDir,
    included: Vec<ApiArtifact>,
    revision: &str,
) -> Result<(), StageError> {
    let spec = run.spec();
    let storage = &run.ctx.storage;
    let dir = work.path().to_path_buf();
    let rules = IgnoreRules::load(&dir, spec.ignore.as_deref()).map_err(|e| {
        StageError::generic(
            st::STORAGE_OPERATION_FAILED,
            "SourceIgnoreError",
            format!("failed to load source ignore patterns: {e}"),
        )
    })?;
    let commit_hex = revision_commit(revision).unwrap_or(revision);
    let artifact = storage
        .new_artifact_for(
            KIND_DIR,
            run.ns,
            run.name,
            revision,
            &git_artifact_file_name(commit_hex),
        )
        .map_err(|e| storage_failed(st::ARCHIVE_OPERATION_FAILED, e))?;
    let artifact = storage
        .archive_async(artifact, dir, rules)
        .await
        .map_err(|e| {
            storage_failed(
                st::ARCHIVE_OPERATION_FAILED,
                format!("unable to archive artifact to storage: {e}"),
            )
        })?;
    drop(work);
    if let Err(e) = storage.garbage_collect_async(&artifact).await {
        tracing::warn!(error = %e, "garbage collection failed");
    }
    let now = jiff::Timestamp::now;
    let api_artifact = st::to_api_artifact(&artifact, now());
    st::artifact_stored(status, spec, api_artifact, included, run.generation, now());
    Ok(())
}

fn git_failed(e: impl std::fmt::Display) -> StageError {
    StageError::generic(
        st::FETCH_FAILED,
        st::GIT_OPERATION_FAILED,
        format!("failed to checkout and determine revision: {e}"),
    )
}

fn git_failed_remote(url: &str) -> impl Fn(GitError) -> StageError + '_ {
    move |e| git_failed(format!("unable to clone '{}': {e}", url_redacted(url)))
}

fn storage_failed(reason: &'static str, e: impl std::fmt::Display) -> StageError {
    StageError::generic(st::STORAGE_OPERATION_FAILED, reason, e.to_string())
}
