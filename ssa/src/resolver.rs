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
    /// The kind is unknown to the API server. Flux's RESTMapper error is not an API NotFound,
    /// so its `DryRunErr` prints it as a dry-run failure without a reason.
    #[error("{subject} dry-run failed: {message}")]
    NoMatch {
        /// `Kind/ns/name`.
        subject: String,
        /// `no matches for kind …`.
        message: String,
    },
    /// The object's namespace does not exist (an API NotFound).
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
    /// Discovery could not be asked (transport error, 5xx, ...): whether the kind exists is
    /// not known.
    #[error("{subject}: discovery failed: {message}")]
    Discovery {
        /// `Kind/ns/name`.
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

/// A kind that discovery did not resolve.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The API server does not serve the kind (or its group/version): Flux's RESTMapper text.
    #[error("no matches for kind \"{kind}\" in version \"{api_version}\"")]
    NoMatch {
        /// Kind.
        kind: String,
        /// `group/version`.
        api_version: String,
        /// The discovery error.
        #[source]
        source: kube::Error,
    },
    /// Discovery itself failed (transport error, 5xx, ...).
    #[error("discovery failed: {}", error_text(.source))]
    Failed {
        /// The discovery error.
        #[source]
        source: kube::Error,
    },
}

impl ResolveError {
    /// Classifies a discovery error for `obj`: only a miss says "no matches for kind".
    pub fn new(obj: &ObjectRef, source: kube::Error) -> Self {
        if is_discovery_miss(&source) {
            ResolveError::NoMatch {
                kind: obj.kind.clone(),
                api_version: obj.api_version(),
                source,
            }
        } else {
            ResolveError::Failed { source }
        }
    }

    /// The lookup error of `obj` this makes (Flux's `dry-run failed: no matches for kind …`).
    pub fn into_lookup(self, obj: &ObjectRef) -> LookupError {
        match self {
            e @ ResolveError::NoMatch { .. } => LookupError::NoMatch {
                subject: obj.subject(),
                message: e.to_string(),
            },
            ResolveError::Failed { source } => LookupError::Discovery {
                subject: obj.subject(),
                message: error_text(&source),
            },
        }
    }
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
                Err(source) => return Err(ResolveError::new(obj, source)),
            }
        };
        let namespaced = matches!(caps.scope, Scope::Namespaced);
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(key, (ar.clone(), namespaced));
        }
        Ok((ar, namespaced))
    }

    /// The live `obj`, or `None` when it does not exist; an error names the object
    /// (`<subject> query failed: …`).
    pub async fn get_live(&self, obj: &ObjectRef) -> Result<Option<DynamicObject>, String> {
        let failed = |e: &dyn std::fmt::Display| format!("{} query failed: {e}", obj.subject());
        let api = self.api(obj).await.map_err(|e| failed(&e))?;
        api.get_opt(&obj.name).await.map_err(|e| failed(&e))
    }

    /// A dynamic API handle for `obj` (namespaced objects need a namespace).
    pub async fn api(&self, obj: &ObjectRef) -> Result<Api<DynamicObject>, LookupError> {
        let (ar, namespaced) = self.resolve(obj).await.map_err(|e| e.into_lookup(obj))?;
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

/// Whether discovery answered that the kind, or its group/version, is not served.
fn is_discovery_miss(e: &kube::Error) -> bool {
    match e {
        kube::Error::Discovery(_) => true,
        kube::Error::Api(s) => s.code == 404,
        _ => false,
    }
}

/// A kube error as clean text for conditions and events: an API status gives its message (not
/// kube's `ApiError: … (Status { … })` Debug dump); any other error gives its `source()`
/// chain, each cause once, so a reset reads `… client error (SendRequest): connection error:
/// Connection reset by peer` rather than stopping at `SendRequest`.
pub(crate) fn error_text(e: &kube::Error) -> String {
    if let kube::Error::Api(s) = e {
        return if !s.message.is_empty() {
            s.message.clone()
        } else if !s.reason.is_empty() {
            s.reason.clone()
        } else {
            format!("HTTP status {}", s.code)
        };
    }
    chain_text(e)
}

/// `e` and its causes joined with `: `, leaving out a cause whose text is already there (most
/// errors repeat their source's text in their own).
fn chain_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let part = cause.to_string();
        if !part.is_empty() && !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        next = cause.source();
    }
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn cm() -> ObjectRef {
        ObjectRef {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "ns".into(),
            name: "x".into(),
        }
    }

    fn api(code: u16, reason: &str, message: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(message, reason)
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn only_a_miss_says_no_matches_for_kind() {
        let missing = kube::Error::Discovery(kube::error::DiscoveryError::MissingKind(
            "GroupVersionKind { group: \"\", version: \"v1\", kind: \"ConfigMap\" }".into(),
        ));
        assert_eq!(
            ResolveError::new(&cm(), missing)
                .into_lookup(&cm())
                .to_string(),
            r#"ConfigMap/ns/x dry-run failed: no matches for kind "ConfigMap" in version "v1""#
        );
        let gone = api(
            404,
            "NotFound",
            "the server could not find the requested resource",
        );
        assert!(matches!(
            ResolveError::new(&cm(), gone).into_lookup(&cm()),
            LookupError::NoMatch { .. }
        ));

        let unavailable = api(
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        );
        let text = ResolveError::new(&cm(), unavailable)
            .into_lookup(&cm())
            .to_string();
        assert_eq!(
            text,
            "ConfigMap/ns/x: discovery failed: the server is currently unable to handle the request"
        );

        #[derive(Debug, thiserror::Error)]
        #[error("client error (SendRequest)")]
        struct SendRequest(#[source] std::io::Error);
        let reset = kube::Error::Service(Box::new(SendRequest(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "connection reset by peer",
        ))));
        let text = ResolveError::new(&cm(), reset)
            .into_lookup(&cm())
            .to_string();
        assert_eq!(
            text,
            "ConfigMap/ns/x: discovery failed: ServiceError: client error (SendRequest): connection reset by peer"
        );
    }

    #[test]
    fn error_chains_name_each_cause_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer: {0}")]
        struct Repeats(#[source] std::io::Error);
        let e = kube::Error::Service(Box::new(Repeats(std::io::Error::other("eof"))));
        // kube repeats its source ("ServiceError: outer: eof"), which repeats its own.
        assert_eq!(error_text(&e), "ServiceError: outer: eof");
    }
}
