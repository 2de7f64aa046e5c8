//! The I/O side of post-build substitution: reading the `substituteFrom` ConfigMaps and
//! Secrets, and the whole `postBuild` step of a reconcile, whose CPU part runs on a blocking
//! thread within a [`Budget`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use rflux_common::api::kustomization::{PostBuild, SubstituteKind, SubstituteReference};
use serde_json::Value;

use super::budget::{Budget, Limits};
use super::error::{PostBuildError, SubstituteError, VarsError};
use super::objects::{SubstituteOptions, object_id, substitute_with_budget, substitution_disabled};

/// Flux's variable set for a Kustomization in `namespace`: each `substituteFrom` source in
/// order (later ones override earlier ones; an `optional` source that does not exist is
/// skipped), then the inline `substitute` map over everything. Newlines are removed from every
/// value. Reads use `client` as is (Flux uses the controller's own client, not the
/// impersonated one).
pub async fn collect_vars(
    client: &kube::Client,
    namespace: &str,
    post_build: &PostBuild,
) -> Result<BTreeMap<String, String>, VarsError> {
    let mut vars = BTreeMap::new();
    for reference in post_build.substitute_from.iter().flatten() {
        let Some(data) = read_source(client, namespace, reference).await? else {
            continue;
        };
        for (k, v) in data {
            vars.insert(k, strip_newlines(&v));
        }
    }
    for (k, v) in post_build.substitute.iter().flatten() {
        vars.insert(k.clone(), strip_newlines(v));
    }
    Ok(vars)
}

fn strip_newlines(v: &str) -> String {
    v.replace('\n', "")
}

async fn read_source(
    client: &kube::Client,
    namespace: &str,
    reference: &SubstituteReference,
) -> Result<Option<Vec<(String, String)>>, VarsError> {
    let optional = reference.optional.unwrap_or(false);
    let (kind, result) = match reference.kind {
        SubstituteKind::ConfigMap => {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
            let r = api
                .get(&reference.name)
                .await
                .map(|cm| cm.data.unwrap_or_default().into_iter().collect::<Vec<_>>());
            ("ConfigMap", r)
        }
        SubstituteKind::Secret => {
            let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
            let r = api.get(&reference.name).await.map(|s| {
                s.data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                    .collect::<Vec<_>>()
            });
            ("Secret", r)
        }
    };
    match result {
        Ok(data) => Ok(Some(data)),
        Err(e) => {
            let (not_found, message) = match &e {
                kube::Error::Api(status) => (status.is_not_found(), status.message.clone()),
                other => (false, other.to_string()),
            };
            if not_found && optional {
                return Ok(None);
            }
            Err(VarsError {
                kind,
                name: reference.name.clone(),
                message,
                not_found,
            })
        }
    }
}

/// The whole post-build substitution step of a reconcile: with `post_build` unset the objects
/// are returned as they are; otherwise the variables are collected and substituted (on a
/// blocking thread, within the default [`Limits`]). As in Flux, an error reading the variables
/// is reported against the first object that does not opt out (and is not reported when every
/// object opts out).
pub async fn post_build(
    client: &kube::Client,
    namespace: &str,
    post_build: Option<&PostBuild>,
    objects: Vec<Value>,
    strict: bool,
) -> Result<Vec<Value>, SubstituteError> {
    let Some(pb) = post_build else {
        return Ok(objects);
    };
    let vars = match collect_vars(client, namespace, pb).await {
        Ok(v) => v,
        Err(e) => {
            return match objects.iter().find(|o| !substitution_disabled(o)) {
                Some(first) => Err(SubstituteError {
                    id: object_id(first),
                    source: PostBuildError::Vars(e),
                }),
                None => Ok(objects),
            };
        }
    };
    let opts = SubstituteOptions::for_post_build(pb, strict);
    substitute_blocking(objects, vars, opts, Limits::default()).await
}

/// Substitutes on a blocking thread (`tokio::task::spawn_blocking`), so that the async
/// workers keep serving other tasks, within `limits` (the deadline starts now). When the
/// returned future is dropped, the substitution stops at its next budget check.
pub async fn substitute_blocking(
    objects: Vec<Value>,
    vars: BTreeMap<String, String>,
    opts: SubstituteOptions,
    limits: Limits,
) -> Result<Vec<Value>, SubstituteError> {
    if objects.is_empty() || (vars.is_empty() && !opts.always) {
        return Ok(objects);
    }
    let first_id = objects.first().map(object_id).unwrap_or_default();
    let cancel = CancelOnDrop(Arc::new(AtomicBool::new(false)));
    let mut budget = Budget::new(limits).with_cancel(cancel.0.clone());
    let task = tokio::task::spawn_blocking(move || {
        substitute_with_budget(objects, &vars, opts, &mut budget)
    });
    let result = task.await.map_err(|e| SubstituteError {
        id: first_id,
        source: PostBuildError::Task(e.to_string()),
    });
    drop(cancel);
    result?
}

/// Sets its flag when dropped: tells the blocking substitution that nobody waits any more.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}
