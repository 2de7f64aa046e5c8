//! Discovery: group/version/kind to API resource and scope, cached per resolver and refreshed
//! on a miss (so the CRDs an earlier stage created resolve).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::Scope;

use super::object::ObjectRef;

/// Why no API handle could be made for an object (Flux's texts).
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// The kind is unknown to the API server, or the object's namespace does not exist.
    #[error("{subject} not found: {message}")]
    NotFound {
        /// `Kind/ns/name`.
        subject: String,
        /// Details.
        message: String,
    },
    /// A namespaced object lacks a namespace.
    #[error("{subject} namespace not specified: {message}")]
    NamespaceNotSpecified {
        /// `Kind/name`.
        subject: String,
        /// Details.
        message: String,
    },
}

/// Maps group/version/kind to API resources through discovery, with a cache that is refreshed
/// on a miss (so CRDs created by an earlier stage resolve).
pub struct Resolver {
    client: Client,
    cache: Mutex<HashMap<GvkKey, (ApiResource, bool)>>,
}

/// Cache key: group, version, kind.
type GvkKey = (String, String, String);

/// A kind that discovery cannot resolve.
#[derive(Debug, thiserror::Error)]
#[error("no matches for kind \"{kind}\" in version \"{api_version}\": {source}")]
pub struct ResolveError {
    /// Kind.
    pub kind: String,
    /// `group/version`.
    pub api_version: String,
    /// The discovery error.
    #[source]
    pub source: kube::Error,
}

impl Resolver {
    /// A resolver with an empty cache.
    pub fn new(client: Client) -> Self {
        Resolver {
            client,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The API resource of `obj`'s kind and whether it is namespaced.
    pub async fn resolve(&self, obj: &ObjectRef) -> Result<(ApiResource, bool), ResolveError> {
        let key = (obj.group.clone(), obj.version.clone(), obj.kind.clone());
        if let Ok(cache) = self.cache.lock()
            && let Some(hit) = cache.get(&key)
        {
            return Ok(hit.clone());
        }
        let gvk = GroupVersionKind::gvk(&obj.group, &obj.version, &obj.kind);
        // A freshly established CRD may take a moment to show up in discovery.
        let mut attempt = 0;
        let (ar, caps) = loop {
            match kube::discovery::pinned_kind(&self.client, &gvk).await {
                Ok(found) => break found,
                Err(e) if attempt < 5 && is_discovery_miss(&e) => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(source) => {
                    return Err(ResolveError {
                        kind: obj.kind.clone(),
                        api_version: obj.api_version(),
                        source,
                    });
                }
            }
        };
        let namespaced = matches!(caps.scope, Scope::Namespaced);
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(key, (ar.clone(), namespaced));
        }
        Ok((ar, namespaced))
    }

    /// A dynamic API handle for `obj` (namespaced objects need a namespace).
    pub async fn api(&self, obj: &ObjectRef) -> Result<Api<DynamicObject>, LookupError> {
        let (ar, namespaced) = self.resolve(obj).await.map_err(|e| LookupError::NotFound {
            subject: obj.subject(),
            message: e.to_string(),
        })?;
        if namespaced {
            if obj.namespace.is_empty() {
                return Err(LookupError::NamespaceNotSpecified {
                    subject: obj.subject(),
                    message: format!("{} is a namespaced kind", obj.kind),
                });
            }
            Ok(Api::namespaced_with(
                self.client.clone(),
                &obj.namespace,
                &ar,
            ))
        } else {
            Ok(Api::all_with(self.client.clone(), &ar))
        }
    }
}

fn is_discovery_miss(e: &kube::Error) -> bool {
    match e {
        kube::Error::Discovery(_) => true,
        kube::Error::Api(s) => s.code == 404,
        _ => false,
    }
}
